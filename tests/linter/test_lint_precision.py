"""What is not per request is not reported: an agent's tool catalogue, a turn appended after the history,
an agent's scratchpad, a pydantic schema's key order; KV203 names a global seed. Each with a near variant
that is still found."""

from __future__ import annotations

from promptlint_assert import LONG, assert_lints

TEMPLATE = f"""
from langchain_core.prompts import PromptTemplate

PROMPT = PromptTemplate.from_template("You can use these tools:\\n{{SLOT}}\\n{LONG}\\nQuestion: {{question}}")


class Agent:
    def __init__(self, llm, plugins):
        self.llm, self.plugins = llm, plugins

    def describe(self):
        return "\\n".join(p.description for p in self.plugins)

    def run(self, question):
        VALUE = self.describe()
        return self.llm.invoke(PROMPT.format(SLOT=VALUE, question=question))
"""


def test_a_tool_catalogue_is_fixed_per_agent():
    for slot in ("tool_description", "tool_info", "formatted_actions", "specs_str"):
        assert_lints(TEMPLATE.replace("SLOT", slot).replace("VALUE", slot))
    per_request = TEMPLATE.replace("VALUE = self.describe()", "user_request = question.strip()")
    assert_lints(per_request.replace("SLOT", "user_request").replace("VALUE", "user_request"), "KV101")


HISTORY = f"""
from datetime import datetime
from openai import OpenAI

client = OpenAI()
TURN = "Time: {{now}}.\\n{LONG}"


def ask(msg_history, system):
    messages = [{{"role": "system", "content": system}}, *msg_history,
                {{"role": "user", "content": TURN.format(now=datetime.now())}}]
    return client.chat.completions.create(model="m", messages=messages)
"""


def test_a_turn_appended_after_the_history_loses_nothing():
    assert_lints(HISTORY)
    first = HISTORY.replace("*msg_history,\n                {", "{")
    first = first.replace("]\n    return", ", *msg_history]\n    return")
    assert_lints(first, "KV101")  # the same turn before the history


SCRATCHPAD = f'''
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

PROMPT = ChatPromptTemplate.from_messages([
    ("system", "{LONG}"),
    MessagesPlaceholder(variable_name="chat_history"),
    ("human", "{{input}}"),
    MessagesPlaceholder(variable_name="agent_scratchpad"),
])
'''


def test_an_agent_scratchpad_is_not_the_history():
    assert_lints(SCRATCHPAD)
    history_last = SCRATCHPAD.replace('    MessagesPlaceholder(variable_name="chat_history"),\n', "")
    history_last = history_last.replace('variable_name="agent_scratchpad"', 'variable_name="chat_history"')
    assert_lints(history_last, "KV101")  # the question before the history


SCHEMA = f'''
import json
from openai import OpenAI

client = OpenAI()


def extract(text, output_format, tools):
    schema = SOURCE
    system = "Answer with JSON matching this schema: " + json.dumps(schema) + "{LONG}"
    return client.chat.completions.create(model="m", messages=[
        {{"role": "system", "content": system}}, {{"role": "user", "content": text}}])
'''


def test_a_pydantic_schema_has_a_fixed_key_order():
    assert_lints(SCHEMA.replace("SOURCE", "output_format.model_json_schema()"))
    alias = SCHEMA.replace("json.dumps(schema)", "json.dumps(tool_schema)")
    assert_lints(alias.replace("SOURCE", "output_format.schema()\n    tool_schema = schema"))  # the same object
    assert_lints(alias.replace("SOURCE", "dict(tools)\n    tool_schema = schema"), "KV201")
    assert_lints(SCHEMA.replace("SOURCE", "{k: str(v) for k, v in output_format.items()}"))  # the mapping's order
    assert_lints(SCHEMA.replace("SOURCE", "{t.name: t.parameters for t in tools}"), "KV201")


def test_kv203_names_a_global_seed():
    source = f'''
import random
from openai import OpenAI

client = OpenAI()
EXAMPLES = ["{LONG}", "{LONG[::-1]}", "{LONG.upper()}"]


def ask(question):
    shots = random.sample(EXAMPLES, k=3)
    return client.chat.completions.create(model="m", messages=[
        {{"role": "system", "content": "\\n".join(shots)}}, {{"role": "user", "content": question}}])


def main():
    random.seed(42)
'''
    (found,) = assert_lints(source, "KV203")
    assert "after the global `random.seed(42)`" in found.message and "unseeded" not in found.message
    (found,) = assert_lints(source.replace("random.seed(42)", "pass"), "KV203")
    assert found.message.startswith("unseeded `random.sample`")


def test_text_only_written_to_a_file_or_printed_is_not_a_prompt():
    source = f'''
from datetime import datetime

SETUP = "{LONG}"


def write_setup(path, llm):
    system_template = f"# generated {{datetime.now()}}\\n" + SETUP
    with open(path, "w") as f:
        f.write(system_template)
'''
    assert_lints(source)
    assert_lints(source + "    return llm.invoke(system_template)\n", "KV101")  # also sent: a prompt


def test_kv103_needs_a_turn_that_changes_per_request():
    source = """
from pathlib import Path
from langchain_core.prompts import PromptTemplate

CODE = Path("experiment.py").read_text()
PROMPT = PromptTemplate.from_template("{task_description}\\n<code>\\n{code}\\n</code>\\nPropose the next idea.")


def propose(llm, task_description):
    return llm.invoke(PROMPT.format(task_description=task_description, code=CODE))
"""
    assert_lints(source)  # a slot only guessed to vary per user before the file: no KV103
    asked = source.replace("{task_description}", "{question}")
    asked = asked.replace("task_description=task_description", "question=question")
    assert_lints(asked.replace("def propose(llm, task_description)", "def propose(llm, question)"), "KV103")
