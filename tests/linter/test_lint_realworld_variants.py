"""Variants of the real-world constructs (session 5): other ways real applications fill a template
or send a prompt, one minimal snippet each, written for these tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

from promptlint_assert import LONG, assert_lints

from radixgate.linter import Settings
from radixgate.linter.runner import lint_paths


def test_langchain_message_objects_sent_through_invoke_or_a_call():
    for send in ("llm.invoke(messages)", "llm(messages)"):
        assert_lints(
            f"""
            from datetime import datetime
            from langchain_core.messages import HumanMessage, SystemMessage

            def ask(llm, question):
                messages = [SystemMessage(content=f"Now: {{datetime.now()}}. {LONG}"), HumanMessage(content=question)]
                return {send}
            """,
            "KV101",
        )
    assert_lints(  # the same messages, the clock last: clean
        f"""
        from datetime import datetime
        from langchain_core.messages import HumanMessage, SystemMessage

        def ask(llm, question):
            question = f"{{question}} {{datetime.now()}}"
            return llm.invoke([SystemMessage(content="{LONG}"), HumanMessage(content=question)])
        """
    )


def test_a_marker_replaced_in_a_template():
    source = f"""
        from datetime import datetime
        from openai import OpenAI

        SYSTEM = "Date: <DATE>. {LONG}"

        def ask(client: OpenAI, question):
            system = SYSTEM.replace("<DATE>", VALUE).replace("\\n", " ")
            return client.chat.completions.create(model="m", messages=[
                {{"role": "system", "content": system}}, {{"role": "user", "content": question}}])
        """
    assert_lints(source.replace("VALUE", "datetime.now().isoformat()"), "KV101")
    assert_lints(source.replace("VALUE", '"Monday"'))  # a fixed value: clean


def test_format_map_fills_like_format():
    assert_lints(
        f"""
        from datetime import datetime
        from openai import OpenAI

        SYSTEM = "Date: {{date}}. {LONG}"

        def ask(client: OpenAI, question):
            system = SYSTEM.format_map({{"date": datetime.now()}})
            return client.chat.completions.create(model="m", messages=[
                {{"role": "system", "content": system}}, {{"role": "user", "content": question}}])
        """,
        "KV101",
    )


def test_what_a_method_of_the_same_class_returns():
    found = assert_lints(
        f"""
        import time
        from openai import OpenAI

        class Bot:
            def __init__(self, client: OpenAI):
                self.client = client
                self.started = time.time()

            def status(self):
                return f"Up for {{int(time.time() - self.started)}} s."

            def answer(self, question):
                return self.client.chat.completions.create(model="m", messages=[
                    {{"role": "user", "content": self.status() + " {LONG} " + question}}])
        """,
        "KV101",
    )
    assert found[0].row == 15  # at the call of `self.status()`, where the prompt is assembled


def test_a_string_built_above_and_sent_by_name():
    assert_lints(
        f"""
        from datetime import datetime

        def ask(llm, question):
            text = f"Today is {{datetime.now()}}. {LONG} Question: {{question}}"
            return llm.invoke(text)
        """,
        "KV101",
    )


def test_system_prompt_keywords_of_other_providers_and_agent_frameworks():
    for call in (
        'genai.GenerativeModel("gemini", system_instruction=SYSTEM).generate_content(question)',
        "co.chat(message=question, preamble=SYSTEM)",
        'Agent(name="support", instructions=SYSTEM)',
    ):
        assert_lints(
            f"""
            from datetime import datetime
            import google.generativeai as genai

            def ask(co, Agent, question):
                SYSTEM = f"Now: {{datetime.now()}}. {LONG}"
                return {call}
            """,
            "KV101",
        )


def test_llamaindex_template_joined_from_pieces():
    assert_lints(
        f"""
        from datetime import datetime
        from llama_index.core import PromptTemplate

        QA = PromptTemplate("Date: {{date}}. " + "{LONG}" + " Query: {{query_str}}")

        def ask(llm, question):
            return llm.complete(QA.format(date=datetime.now(), query_str=question))
        """,
        "KV101",
    )


def test_role_pairs_and_role_dicts_sent_through_invoke_or_stream():
    for messages in ('[("system", SYSTEM), ("human", question)]', '[{"role": "system", "content": SYSTEM}]'):
        assert_lints(
            f"""
            from datetime import datetime

            def ask(llm, question):
                SYSTEM = f"Now: {{datetime.now()}}. {LONG}"
                return llm.stream({messages})
            """,
            "KV101",
        )


def test_a_docstring_sample_named_with_text_is_not_a_prompt_template():
    sample = f"Example: load {{checkpoint}} with {{model_class}}. {LONG}"
    source = f"""
        # docstring templates, filled when the library is imported
        {{name}} = "{sample}"

        def add_sample(fn, checkpoint, model_class):
            fn.__doc__ = {{name}}.format(checkpoint=checkpoint, model_class=model_class)
        """
    assert_lints(source.replace("{name}", "TEXT_TO_AUDIO_SAMPLE"))  # `text` is not the last word
    assert_lints(source.replace("{name}", "QA_PROMPT_TEXT"), "KV101", "KV101")


def test_langchain_setup_slots_are_not_per_request_inputs():
    source = f"""
        from langchain_core.output_parsers import PydanticOutputParser

        QA_PROMPT = \"\"\"Answer the question.
        {{SLOT}}
        {LONG}
        Question: {{question}}\"\"\"

        def ask(llm, parser: PydanticOutputParser, question):
            return llm.invoke(QA_PROMPT.format(SLOT=parser.get_format_instructions(), question=question))
        """
    assert_lints(source.replace("SLOT", "format_instructions"))
    assert_lints(source.replace("SLOT", "user_notes"), "KV101")  # any other slot filled per call


def test_a_relative_import_after_a_module_constant(tmp_path: Path):
    for package in ("app", "other"):  # two `prompts` modules: only the package path tells them apart
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "other" / "prompts.py").write_text('QA_TEMPLATE = "Summarise: {text}"\n')
    (tmp_path / "app" / "prompts.py").write_text(f'QA_TEMPLATE = "Time: {{now}}. {LONG} Question: {{question}}"\n')
    (tmp_path / "app" / "chat.py").write_text(
        textwrap.dedent(
            """
            from datetime import datetime
            MODEL = "gpt-4o"
            from .prompts import QA_TEMPLATE

            def ask(llm, question):
                return llm.invoke(QA_TEMPLATE.format(now=datetime.now(), question=question))
            """
        )
    )
    found = lint_paths([str(tmp_path)], Settings()).violations
    assert [(Path(v.filename).name, v.code) for v in found] == [("chat.py", "KV101")]


def test_jinja_and_string_template_objects():
    for build, call in (
        ('jinja2.Template("Now: {{ now }}. LONG Q: {{ q }}")', "SYSTEM.render(now=datetime.now(), q=q)"),
        ('string.Template("Now: $now. LONG Q: ${q}")', "SYSTEM.substitute({'now': datetime.now(), 'q': q})"),
    ):
        source = f"""
            import string
            from datetime import datetime

            import jinja2

            SYSTEM = {build.replace("LONG", LONG)}

            def ask(llm, q):
                return llm.invoke([("system", {call}), ("human", q)])
            """
        assert_lints(source, "KV101")
        assert_lints(source.replace("datetime.now()", '"Monday"'))  # a fixed value: clean
