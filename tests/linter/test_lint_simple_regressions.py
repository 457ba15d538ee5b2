"""Simple code real applications write: repeated constants, a name rebuilt from itself, `partial_variables`
constants. Each with a near variant that stays clean."""

from __future__ import annotations

from promptlint_assert import LONG, assert_lints

HEAD = """
from datetime import datetime
from openai import OpenAI

client = OpenAI()
"""


def send(content: str) -> str:
    return f"""
    return client.chat.completions.create(model="m", messages=[
        {{"role": "system", "content": {content}}}, {{"role": "user", "content": question}}])
"""


def test_repeated_constant_is_static_text():
    policy = 'POLICY = "Refunds follow section 4 of the returns policy; shipping follows section 7. " * 10\n'
    start = HEAD + policy + "def reply(question):\n"
    assert_lints(start + '    system = f"Current time: {datetime.now()}\\n{POLICY}"' + send("system"), "KV101")
    assert_lints(start + '    system = f"{POLICY}\\nCurrent time: {datetime.now()}"' + send("system"))
    short = HEAD + 'POLICY = "Be brief. " * 2\n' + "def reply(question):\n"
    assert_lints(short + '    system = f"Current time: {datetime.now()}\\n{POLICY}"' + send("system"))  # ~6 tokens


def test_a_name_rebuilt_from_itself_keeps_its_old_value():
    start = HEAD + f'INSTRUCTIONS = "{LONG}"\n\n\ndef reply(question):\n    template = INSTRUCTIONS\n'
    header = '    header = f"Request received {datetime.now()} at the front desk.\\n"\n'
    assert_lints(start + header + "    template = header + template" + send("template"), "KV101")
    assert_lints(start + header + "    template = template + header" + send("template"))


def test_partial_variables_constants_count_as_static_text():
    def source(template: str) -> str:
        return f'''
from datetime import datetime
from langchain_core.prompts import PromptTemplate

LONG = "{LONG}"
PROMPT = PromptTemplate(
    template="{template}",
    input_variables=["now", "question"],
    partial_variables={{"instructions": LONG}},
)


def answer(llm, question):
    return llm.invoke(PROMPT.format(now=datetime.now().isoformat(), question=question))
'''

    assert_lints(source("Now: {now}\\n{instructions}\\nQuestion: {question}"), "KV101")
    assert_lints(source("{instructions}\\nNow: {now}\\nQuestion: {question}"))
