"""The constructs real applications use that promptlint used to miss, one minimal snippet
each (written for these tests), and the precision cases that must stay clean."""

from __future__ import annotations

import textwrap
from pathlib import Path

from promptlint_assert import LONG, assert_lints

from radixgate.linter import Settings
from radixgate.linter.runner import lint_paths


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return tmp_path


def _codes(result) -> list[tuple[str, str]]:
    return sorted((Path(v.filename).name, v.code) for v in result.violations)


# -- 1. `.partial(time=lambda: ...)` and `partial_variables=` ----------------------------------
def test_partial_with_a_clock_and_partial_variables():
    assert_lints(
        f"""
        from datetime import datetime
        from langchain_core.prompts import PromptTemplate

        chat = PromptTemplate.from_template("It is {{now}}. {LONG} {{question}}").partial(
            now=lambda: datetime.now().isoformat())
        """,
        "KV101",
    )
    assert_lints(
        f"""
        import time
        from langchain_core.prompts import PromptTemplate

        chat = PromptTemplate(template="Clock {{stamp}}. {LONG} {{question}}",
                              input_variables=["question"], partial_variables={{"stamp": lambda: time.time()}})
        """,
        "KV101",
    )


# -- 2. `template = header + template` -------------------------------------------------------
def test_template_reassigned_under_its_own_name():
    assert_lints(
        f"""
        from langchain_core.prompts import PromptTemplate

        def build(header: str):
            template = "{LONG} Answer: {{answer_style}}"
            template = "Customer {{customer_id}} asks. " + template
            return PromptTemplate.from_template(template)
        """,
        "KV101",
    )


# -- 3. a class field sent through the project's own wrapper ---------------------------------
def test_class_field_through_own_wrapper_is_followed(tmp_path):
    root = _project(
        tmp_path,
        {
            "app/llm.py": """
                from openai import OpenAI

                class LLM:
                    def __init__(self):
                        self.client = OpenAI()

                    def generate(self, prompt):
                        return self.client.chat.completions.create(
                            model="m", messages=[{"role": "user", "content": prompt}])
                """,
            "app/bot.py": f"""
                from app.llm import LLM

                class Bot:
                    def __init__(self):
                        self.llm = LLM()
                        self.prompt_template = "{LONG}"

                    def answer(self, question):
                        prompt = question + "\\n" + self.prompt_template
                        return self.llm.generate(prompt)
                """,
        },
    )
    result = lint_paths([str(root)], Settings())
    assert _codes(result) == [("bot.py", "KV101")]
    assert "sent by `generate()` → `self.client.chat.completions.create`" in result.violations[0].message


def test_function_wrapper_run_llm():
    found = assert_lints(
        f"""
        from openai import OpenAI

        def run_llm(prompt):
            return OpenAI().chat.completions.create(model="m", messages=[{{"role": "user", "content": prompt}}])

        def ask(question):
            return run_llm(f"{{question}}\\n{LONG}")
        """,
        "KV101",
    )
    assert "sent by `run_llm()`" in found[0].message


# -- 4. a date injected in an overridden `StringPromptTemplate.format` ------------------------
def test_custom_format_override_injecting_a_date():
    assert_lints(
        f"""
        from datetime import date
        from langchain_core.prompts import StringPromptTemplate

        class DatedPrompt(StringPromptTemplate):
            template: str = "Today is {{today}}. {LONG} {{question}}"

            def format(self, **kwargs):
                kwargs["today"] = date.today().isoformat()
                return self.template.format(**kwargs)
        """,
        "KV101",
    )


# -- 5. a template imported from another module, wired through keyword arguments -------------
def test_imported_template_through_keyword_arguments(tmp_path):
    root = _project(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/prompts.py": f'QA = "Question: {{question}}\\n{LONG}"\n',
            "pkg/chain.py": """
                from langchain_core.prompts import PromptTemplate
                from .prompts import QA

                def make_chain(llm, template=QA):
                    return PromptTemplate(template=template, input_variables=["question"]) | llm

                def main(llm):
                    return make_chain(llm, template=QA)
                """,
        },
    )
    assert ("chain.py", "KV101") in _codes(lint_paths([str(root)], Settings()))


# -- 6. dynamic sources: arrow, pendulum, humanize, time arithmetic --------------------------
def test_relative_time_sources():
    for expr in (
        "arrow.get(mtime).humanize()",
        "humanize.naturaltime(mtime)",
        "pendulum.now().to_iso8601_string()",
        "round(time.time() - mtime)",
    ):
        assert_lints(
            f"""
            import arrow, humanize, pendulum, time
            from openai import OpenAI

            def ask(client: OpenAI, mtime, q):
                system = f"Updated {{{expr}}}. {LONG}"
                return client.chat.completions.create(model="m", messages=[
                    {{"role": "system", "content": system}}, {{"role": "user", "content": q}}])
            """,
            "KV101",
        )


# -- 7. a set stored on an attribute and iterated in a method --------------------------------
def test_set_on_an_attribute_iterated_in_a_method():
    assert_lints(
        f"""
        from openai import OpenAI

        class Agent:
            def __init__(self):
                self.tools = {{"search", "calculator", "weather"}}

            def ask(self, client: OpenAI, q):
                system = "Tools: " + ", ".join(self.tools) + " {LONG}"
                return client.chat.completions.create(model="m", messages=[
                    {{"role": "system", "content": system}}, {{"role": "user", "content": q}}])
        """,
        "KV202",
    )


# -- 8. FewShotPromptTemplate as a sink ------------------------------------------------------
def test_few_shot_prompt_template_prefix_before_examples():
    assert_lints(
        f"""
        from langchain_core.prompts import FewShotPromptTemplate, PromptTemplate

        EXAMPLES = [{{"q": "2+2", "a": "4"}}, {{"q": "3+3", "a": "6"}}]
        shots = FewShotPromptTemplate(
            prefix="Student {{student_id}}. {LONG}",
            examples=EXAMPLES,
            example_prompt=PromptTemplate.from_template("Q: {{q}} A: {{a}}"),
            suffix="Q: {{question}}",
            input_variables=["student_id", "question"],
        )
        """,
        "KV101",
    )


# -- 9. files read in a glob loop and stored on `self` ---------------------------------------
def test_directory_order_through_an_attribute():
    assert_lints(
        f"""
        import glob
        from openai import OpenAI

        class Kb:
            def __init__(self, folder):
                text = ""
                for path in glob.glob(folder + "/*.md"):
                    text += open(path).read()
                self.docs = text

            def ask(self, client: OpenAI, q):
                return client.chat.completions.create(model="m", messages=[
                    {{"role": "system", "content": "{LONG}" + self.docs}}, {{"role": "user", "content": q}}])
        """,
        "KV204",
    )


# -- 10. KV2xx carried through template placeholders -----------------------------------------
def test_flaw_carried_through_a_placeholder():
    assert_lints(
        f"""
        from langchain_core.prompts import PromptTemplate

        TOOLS = {{"search", "calculator"}}
        prompt = PromptTemplate.from_template("Tools: {{tools}}. {LONG} {{question}}")

        def run(llm, q):
            return (prompt | llm).invoke({{"tools": ", ".join(TOOLS), "question": q}})
        """,
        "KV202",
    )


# -- 11. a module-level seed does not make a per-request shuffle stable ----------------------
def test_global_seed_does_not_excuse_a_shuffle_per_request():
    assert_lints(
        f"""
        import random
        from openai import OpenAI

        random.seed(42)
        EXAMPLES = ["a -> b", "c -> d", "e -> f"]

        def ask(client: OpenAI, q):
            shots = list(EXAMPLES)
            random.shuffle(shots)
            return client.chat.completions.create(model="m", messages=[
                {{"role": "user", "content": "\\n".join(shots) + "{LONG}" + q}}])
        """,
        "KV203",
    )


# -- precision cases -------------------------------------------------------------------------
def test_per_query_retrieval_after_the_question_is_not_kv103():
    assert_lints(
        """
        from openai import OpenAI

        def answer(client: OpenAI, retriever, question):
            docs = retriever.get_relevant_documents(question)
            context = "\\n".join(d.page_content for d in docs)
            return client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": f"Question: {question}\\nContext:\\n{context}"}])
        """
    )


def test_a_short_trailer_after_the_question_is_not_kv101():
    assert_lints(
        """
        from openai import OpenAI

        def ask(client: OpenAI, question):
            return client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": f"{question}\\n\\nThink step by step, then give the final answer."}])
        """
    )


def test_vendored_copies_are_excluded_by_default(tmp_path):
    bad = f'from datetime import datetime\ndef build():\n    system_prompt = f"{{datetime.now()}} {LONG}"\n'
    root = _project(tmp_path, {"app/vendor/langchain/x.py": bad, "app/venv/lib/y.py": bad, "app/main.py": "x = 1\n"})
    assert lint_paths([str(root)], Settings()).violations == []
    assert len(lint_paths([str(root)], Settings(default_excludes=False)).violations) == 2


def test_explicit_files_read_imports_for_summaries_but_report_only_themselves(tmp_path):
    root = _project(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'x'\n",
            "svc/llm.py": f"""
                from datetime import datetime
                from openai import OpenAI

                def ask_model(prompt):
                    stamp = datetime.now()
                    return OpenAI().chat.completions.create(model="m", messages=[
                        {{"role": "system", "content": f"{{stamp}} {LONG}"}}, {{"role": "user", "content": prompt}}])
                """,
            "svc/handler.py": f"""
                from svc.llm import ask_model

                def handle(question):
                    return ask_model(question + " {LONG}")
                """,
        },
    )
    result = lint_paths([str(root / "svc" / "handler.py")], Settings())
    assert _codes(result) == [("handler.py", "KV101")]  # llm.py read, its own finding not reported
    assert "sent by `ask_model()`" in result.violations[0].message


def test_a_placeholder_filled_from_configuration_is_not_per_request():
    # `{fence}` is chosen once per instance (or is a module constant): the prefix is the same on every call.
    assert_lints(
        f"""
        EDIT_PROMPT = "Wrap code in {{fence}}. {LONG} Request: {{request}}"
        FENCE = "```"

        class Coder:
            def __init__(self, fence):
                self.fence = fence

            def messages(self, request):
                a = EDIT_PROMPT.format(fence=self.fence, request=request)
                b = EDIT_PROMPT.format(fence=FENCE, request=request)
                return [a, b]
        """
    )
    # The same template filled with a per-call value is still reported.
    assert_lints(
        f"""
        EDIT_PROMPT = "Wrap code in {{fence}}. {LONG} Request: {{request}}"

        def messages(fence, request):
            return EDIT_PROMPT.format(fence=fence, request=request)
        """,
        "KV101",
    )


def test_a_flaw_filled_in_another_module_is_reported_inside_the_template_file(tmp_path):
    root = _project(
        tmp_path,
        {
            "app/prompts.py": f'RULES_PROMPT = """Rules:\\n{{rules}}\\n{LONG}"""\n',
            "app/review.py": """
                from app.prompts import RULES_PROMPT

                RULES = {"no print calls", "no bare except"}

                def review(diff):
                    return [RULES_PROMPT.format(rules="\\n".join(RULES)), diff]
                """,
        },
    )
    result = lint_paths([str(root)], Settings())
    lines = {
        Path(v.filename).name: len((root / "app" / Path(v.filename).name).read_text().splitlines())
        for v in result.violations
    }
    for v in result.violations:
        assert v.row <= lines[Path(v.filename).name], f"{v.filename}:{v.row} is past the end of the file"
    assert [(Path(v.filename).name, v.code) for v in result.violations] == [("prompts.py", "KV202")]


def test_a_message_list_sent_through_a_client_class_held_on_self():
    found = assert_lints(
        f"""
        from openai import OpenAI

        class Model:
            def __init__(self, name):
                self.name = name
                self.client = OpenAI()

            def call(self, messages):
                return self.client.chat.completions.create(model=self.name, messages=messages)

        class Agent:
            def __init__(self):
                self.llm = Model("m")

            def ask(self, question):
                return self.llm.call([{{"role": "user", "content": f"Question: {{question}}\\n{LONG}"}}])

            def ask_built(self, question):
                messages = [{{"role": "system", "content": "{LONG}"}}]
                messages.append({{"role": "user", "content": question}})
                return self.llm.call(messages)
        """,
        "KV101",
    )
    assert "sent by `call()`" in found[0].message


def test_templates_joined_from_pieces():
    # Module constants built from earlier ones, `"".join` of literal pieces, and `template += piece`.
    assert_lints(
        f"""
        from openai import OpenAI

        HEADER = "The user {{user_name}} asks: {{question}}\\n"
        FORMAT = "Answer format:\\n" + "{LONG}"
        client = OpenAI()

        def joined(user_name, question):
            template = "\\n".join([HEADER, FORMAT])
            return client.chat.completions.create(model="m", messages=[
                {{"role": "user", "content": template.format(user_name=user_name, question=question)}}])

        def augmented(question):
            template = HEADER
            template += FORMAT
            return client.chat.completions.create(model="m", messages=[
                {{"role": "user", "content": template.format(user_name="support", question=question)}}])
        """,
        "KV101",
        "KV101",
        "KV101",
    )


def test_a_template_read_as_an_attribute_of_a_project_module(tmp_path):
    root = _project(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'x'\n",
            "app/__init__.py": "",
            "app/prompts.py": f'REVIEW = """Review this change:\\n{{change}}\\n{LONG}"""\n',
            "app/review.py": """
                from openai import OpenAI
                from app import prompts

                def review(question):
                    return OpenAI().chat.completions.create(model="m", messages=[
                        {"role": "user", "content": prompts.REVIEW.format(change=question)}])
                """,
        },
    )
    assert _codes(lint_paths([str(root)], Settings())) == [("review.py", "KV101")]


def test_a_template_is_judged_by_where_it_is_formatted_not_by_other_templates_with_the_same_slot():
    # `{fence}` of SYSTEM_PROMPT is filled from the coder's settings; another template's `{fence}`
    # is filled per call, which says nothing about SYSTEM_PROMPT.
    assert_lints(
        f"""
        SYSTEM_PROMPT = "Wrap edits in {{fence}}. {LONG}"
        ERROR_PROMPT = "The edit was not wrapped in {{fence}}."

        class Coder:
            def __init__(self, fence):
                self.fence = fence

            def system(self):
                return SYSTEM_PROMPT.format(fence=self.fence)

        def error_message(fence):
            return ERROR_PROMPT.format(fence=fence)
        """
    )


def test_per_query_documents_before_long_instructions_are_kv101():
    # Retrieved per request, they end the cached prefix like the question does; a short trailer is fine.
    assert_lints(
        f"""
        def build(context):
            while True:
                prompt = f"Context:\\n{{context}}\\n{LONG}"
                return prompt

        def short(context, question):
            prompt = f"You answer questions. {LONG}\\nContext:\\n{{context}}\\nQuestion: {{question}}\\nAnswer:"
            return prompt
        """,
        "KV101",
    )


def test_a_branch_in_one_function_does_not_see_another_functions_prompt():
    # `prompt` first bound inside a loop: the previous function's `prompt` must not stand in for it.
    assert_lints(
        f"""
        def first(user_input):
            prompt = f"{{user_input}} {LONG}"
            return prompt

        def second(context):
            while True:
                prompt = f"{{context}} {LONG}"
                return prompt
        """,
        "KV101",
        "KV101",
    )
