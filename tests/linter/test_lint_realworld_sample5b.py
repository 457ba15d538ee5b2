"""Constructs behind the breakers of the second development sample (session 5b, seed 5005), one
minimal snippet each, written for these tests, with a near variant that must stay clean."""

from __future__ import annotations

from pathlib import Path

from promptlint_assert import LONG, assert_lints

from radixgate.linter import Settings
from radixgate.linter.analysis.ordering import estimate_tokens
from radixgate.linter.runner import lint_paths

# Two halves of one block of instructions, each under 64 tokens, together over it.
HEAD = (
    "Write an outline of section headers for the report described above. Keep only topics that "
    "belong to the research itself, leave out an introduction, a conclusion and references, and use"
)
TAIL = (
    "headers at most. Return nothing but JSON with the fields title (a string) and sections (a list of "
    "strings), and never wrap the JSON in code fences or add a sentence before or after it."
)


def test_the_halves_are_short_alone_and_long_together():
    assert estimate_tokens(HEAD) < 64 and estimate_tokens(TAIL) < 64
    assert estimate_tokens(HEAD + " 5 " + TAIL) >= 64


def test_text_a_person_wrote_is_per_request_when_the_name_says_who():
    for name in ("user_description", "human_feedback", "user_request"):
        assert_lints(
            f"""
            def ask(llm, {name}):
                prompt = f"Profile: {{{name}}}. {LONG}"
                return llm.invoke(prompt)
            """,
            "KV101",
        )
    assert_lints(  # a tool's description is fixed text, and the person's text last is where it belongs
        f"""
        def ask(llm, tool_description, user_description):
            prompt = f"Tool: {{tool_description}}. {LONG} Profile: {{user_description}}"
            return llm.invoke(prompt)
        """
    )


def test_a_count_setting_does_not_split_the_instructions_around_it():
    assert_lints(
        f"""
        def outline(client, question, max_sections):
            content = f"Question: {{question}}. {HEAD} {{max_sections}} {TAIL}"
            return client.chat.completions.create(model="m", messages=[{{"role": "user", "content": content}}])
        """,
        "KV101",
    )
    assert_lints(  # split by a value that is not a count: two short blocks, nothing worth caching lost
        f"""
        def outline(client, question, tone):
            content = f"Question: {{question}}. {HEAD} {{tone}} {TAIL}"
            return client.chat.completions.create(model="m", messages=[{{"role": "user", "content": content}}])
        """
    )


def test_templates_kept_in_a_dict_and_selected_by_key():
    for key in ("self.version", '"v1"'):
        assert_lints(
            f"""
            import anthropic

            GRADERS = {{
                "v1": "Question: {{question}}. {LONG}",
                "v2": "Question: {{question}}. Answer briefly. {LONG}",
            }}

            class Grader:
                def __init__(self, version):
                    self.version = version
                    self.client = anthropic.Anthropic()

                def grade(self, question):
                    prompt = GRADERS[{key}].format(question=question)
                    return self.client.messages.create(
                        model="m", max_tokens=5, messages=[{{"role": "user", "content": prompt}}]
                    )
            """,
            "KV101",
        )
    assert_lints(  # the same table with the question last
        f"""
        import anthropic

        GRADERS = {{"v1": "{LONG} Question: {{question}}"}}

        def grade(version, question):
            prompt = GRADERS[version].format(question=question)
            client = anthropic.Anthropic()
            return client.messages.create(model="m", max_tokens=5, messages=[{{"role": "user", "content": prompt}}])
        """
    )


def test_a_table_of_templates_imported_from_another_module(tmp_path: Path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "grade.py").write_text(
        "import anthropic\n"
        "from app.prompts import GRADERS\n\n\n"
        "def grade(version, question):\n"
        "    prompt = GRADERS[version].format(question=question)\n"
        '    messages = [{"role": "user", "content": prompt}]\n'
        '    return anthropic.Anthropic().messages.create(model="m", max_tokens=5, messages=messages)\n'
    )
    for template, codes in ((f"Question: {{question}}. {LONG}", ["KV101"]), (f"{LONG} Question: {{question}}", [])):
        (tmp_path / "app" / "prompts.py").write_text(f"GRADERS = {{'v1': {template!r}}}\n")
        found = lint_paths([str(tmp_path)], Settings()).violations
        assert [v.code for v in found] == codes
        assert all(v.filename.endswith("grade.py") and v.row == 6 for v in found)  # at the use, in its own file


def test_the_module_docstring_is_fixed_text():
    assert_lints(
        f"""
        def describe(llm):
            return llm.invoke(f"{{__doc__}} {LONG}")
        """
    )
