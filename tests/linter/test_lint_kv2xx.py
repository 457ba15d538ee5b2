"""KV201-KV204: content whose order is unstable (json key order, sets, shuffles, listings),
and their safe fixes."""

import textwrap

from promptlint_assert import LONG, assert_lints

from radixgate.linter import fixes
from radixgate.linter.checker import check_source
from radixgate.linter.settings import Settings


def _fix(source: str, unsafe: bool = False) -> str:
    source = textwrap.dedent(source)
    found = fixes.attach(source, check_source(source, "s.py", Settings()))
    fixed, count = fixes.apply(source, found, unsafe)
    assert count >= 1
    assert not check_source(fixed, "s.py", Settings()), fixed
    return fixed


TOOLS_DUMPS = f'''
    import json
    from openai import OpenAI

    def ask(client: OpenAI, tools, q):
        system = "Tools: " + json.dumps(tools) + "{LONG}"
        return client.chat.completions.create(model="m", messages=[
            {{"role": "system", "content": system}}, {{"role": "user", "content": q}}])
    '''


def test_json_dumps_of_tools_without_sort_keys_is_kv201_and_fix_adds_it():
    found = assert_lints(TOOLS_DUMPS, "KV201")
    assert found[0].col == 26
    assert "json.dumps(tools, sort_keys=True)" in _fix(TOOLS_DUMPS)


def test_json_dumps_of_a_literal_or_at_the_end_is_clean():
    assert_lints(f'''
        import json

        def build(payload, q):
            schema = json.dumps({{"type": "object"}})
            return [{{"role": "system", "content": "{LONG}" + schema}},
                    {{"role": "user", "content": q + json.dumps(payload)}}]
        ''')


def test_tool_schema_dumps_is_reported_even_at_the_end():
    assert_lints(
        """
        import json

        def build(q, tool_schemas):
            return [{"role": "user", "content": q}, {"role": "user", "content": json.dumps(tool_schemas)}]
        """,
        "KV201",
    )


SET_JOIN = f'''
    from openai import OpenAI

    def ask(client: OpenAI, q):
        return client.chat.completions.create(model="m", messages=[
            {{"role": "system", "content": "Labels: " + ", ".join({{"a", "b", "c"}}) + "{LONG}"}},
            {{"role": "user", "content": q}}])
    '''


def test_set_joined_into_the_prompt_is_kv202_and_fix_sorts_it():
    assert_lints(SET_JOIN, "KV202")
    assert 'sorted({"a", "b", "c"})' in _fix(SET_JOIN)


def test_set_comprehension_and_set_call_feed_kv202_unless_sorted():
    assert_lints(
        f'''
        def build(tags, q):
            names = {{t.lower() for t in tags}}
            system = "Tags: " + " ".join(names) + "{LONG}"
            return [{{"role": "system", "content": system}}, {{"role": "user", "content": q}}]
        ''',
        "KV202",
    )
    assert_lints(f'''
        def build(tags, q):
            system = "Tags: " + " ".join(sorted(set(tags))) + "{LONG}"
            return [{{"role": "system", "content": system}}, {{"role": "user", "content": q}}]
        ''')


def test_unseeded_shuffle_before_the_question_is_kv203():
    assert_lints(
        """
        import random

        def build(examples, q):
            random.shuffle(examples)
            return [{"role": "system", "content": "Classify."}, *examples, {"role": "user", "content": q}]
        """,
        "KV203",
    )


def test_seeded_generators_and_payload_last_are_clean():
    assert_lints(f'''
        import random
        import numpy as np

        def build(examples, items, q):
            rng = random.Random(0)
            rng.shuffle(examples)
            picked = np.random.default_rng(1).choice(items)
            random.shuffle(items)
            return [{{"role": "system", "content": "{LONG}"}}, *examples,
                    {{"role": "user", "content": q + "Rank: " + ", ".join(items)}}]
        ''')


def test_unseeded_random_instance_is_kv203():
    assert_lints(
        """
        import random

        def build(pool, q):
            rng = random.Random()
            shots = rng.sample(pool, 3)
            return [*shots, {"role": "user", "content": q}]
        """,
        "KV203",
    )


LISTDIR = """
    import os

    def build(folder, q):
        docs = [open(os.path.join(folder, n)).read() for n in os.listdir(folder)]
        return [{"role": "system", "content": "\\n".join(docs)}, {"role": "user", "content": q}]
    """


def test_listdir_documents_are_kv204_and_fix_sorts_the_listing():
    assert_lints(LISTDIR, "KV204")
    assert "sorted(os.listdir(folder))" in _fix(LISTDIR)


def test_scandir_and_walk_are_reported_without_a_fix():
    source = """
        import os

        def build(folder, q):
            docs = [open(e.path).read() for e in os.scandir(folder)]
            return [{"role": "system", "content": "\\n".join(docs)}, {"role": "user", "content": q}]
        """
    found = fixes.attach(textwrap.dedent(source), assert_lints(source, "KV204"))
    assert found[0].fix is None


def test_unsafe_fix_moves_the_dynamic_sentence_after_static_text():
    source = f"""
        from datetime import datetime

        def build(q):
            return [{{"role": "system", "content": f"Today is {{datetime.now()}}. {LONG}"}},
                    {{"role": "user", "content": q}}]
        """
    text = textwrap.dedent(source)
    found = fixes.attach(text, check_source(text, "s.py", Settings()))
    assert found[0].fix.applicability == "unsafe"
    assert fixes.apply(text, found, unsafe=False) == (text, 0)
    fixed = _fix(source, unsafe=True)
    assert "Today is {datetime.now()}." in fixed and fixed.index("meticulous") < fixed.index("Today")


def test_dict_built_from_a_set_iterates_in_hash_order():
    assert_lints(
        f'''
        def build(names, q):
            specs = {{n: n.upper() for n in set(names)}}
            system = "Tools: " + ", ".join(specs.values()) + "{LONG}"
            return [{{"role": "system", "content": system}}, {{"role": "user", "content": q}}]
        ''',
        "KV202",
    )


def test_a_slice_of_shuffled_examples_is_still_shuffled():
    assert_lints(
        f"""
        import random

        def build(pool, q):
            examples = [p["text"] for p in pool]
            random.shuffle(examples)
            prompt = "Examples:\\n" + "\\n".join(examples[:8]) + "\\n{LONG}\\n" + q
            return [{{"role": "user", "content": prompt}}]
        """,
        "KV203",
    )


def test_unsafe_fix_handles_a_placeholder_with_a_format_spec():
    fixed = _fix(
        f"""
        from datetime import datetime

        def build(q):
            return [{{"role": "system", "content": f"Today is {{datetime.now():%Y-%m-%d}}. {LONG}"}},
                    {{"role": "user", "content": q}}]
        """,
        unsafe=True,
    )
    assert fixed.index("meticulous") < fixed.index("Today is {datetime.now():%Y-%m-%d}.")
