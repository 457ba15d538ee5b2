"""Constructs behind the development half of the real-world evaluation's second batch (session 6):
one minimal snippet each, written for these tests, with a near variant that must stay clean."""

from __future__ import annotations

import textwrap

from promptlint_assert import LONG, assert_lints

from radixgate.linter.analysis.ordering import estimate_tokens

CHAT = textwrap.dedent(
    """
    from langchain_core.prompts import ChatPromptTemplate, HumanMessagePromptTemplate, MessagesPlaceholder
    from langchain_core.prompts import SystemMessagePromptTemplate

    from app.config import CFG

    TEMPLATE_EN = \"\"\"LONG
    EN_TAIL\"\"\"
    TEMPLATE_DE = \"\"\"LONG
    DE_TAIL\"\"\"
    TEMPLATE = TEMPLATE_EN if CFG.LANGUAGE == "en" else TEMPLATE_DE

    prompt = ChatPromptTemplate.from_messages(
        [
            SystemMessagePromptTemplate.from_template(TEMPLATE),
            MessagesPlaceholder(variable_name="chat_history"),
            HumanMessagePromptTemplate.from_template("HUMAN"),
        ]
    )
    """
)


def _chat(en_tail: str, de_tail: str, human: str) -> str:
    return CHAT.replace("LONG", LONG).replace("EN_TAIL", en_tail).replace("DE_TAIL", de_tail).replace("HUMAN", human)


def test_a_template_chosen_between_language_variants_by_a_conditional():
    # the retrieved context and the question in the system message, before the conversation history:
    # reported in each variant (the one read, and where the other has the same slot), as both are sent
    found = assert_lints(
        _chat("known information: {context} question: {question}", "Wissen: {context} Frage: {question}", "{question}"),
        "KV101",
        "KV101",
    )
    assert sorted(v.row for v in found) == [8, 10]  # the EN tail and the DE tail
    # variants with other slots are not one prompt in two languages: only the variant read is reported
    assert_lints(_chat("known information: {context} question: {question}", "Wissen: {context}", "{question}"), "KV101")
    # the same variants holding only instructions: the history, then the context and question, come after
    assert_lints(_chat("Be concise.", "Sei knapp.", "known information: {context} question: {question}"))


VARIANTS = textwrap.dedent(
    """
    from langchain_core.prompts import PromptTemplate

    from app.config import CFG

    EN = \"\"\"Question: {question}
    EN_REST\"\"\"
    DE = \"\"\"Frage: {question}
    DE_REST\"\"\"
    TEMPLATE = EN if CFG.LANGUAGE == "en" else DE

    prompt = PromptTemplate.from_template(TEMPLATE)
    """
)


def test_static_text_pushed_out_is_reported_in_the_other_variant_only_where_it_has_that_much_too():
    source = VARIANTS.replace("EN_REST", LONG)
    found = assert_lints(source.replace("DE_REST", LONG), "KV101", "KV101")
    assert sorted(v.row for v in found) == [6, 8]  # the question in EN and in DE
    # the other variant has only a short line after the question: nothing worth caching lost there
    found = assert_lints(source.replace("DE_REST", "Antworte kurz."), "KV101")
    assert found[0].row == 6


HEAD = """
    import glob
    import random
    from openai import OpenAI

    def grade_all(client: OpenAI, folder):
        files = glob.glob(folder + "/*.json")
        random.shuffle(files)
"""


def test_items_of_an_unordered_listing_sent_one_per_prompt_are_not_reordered_content():
    one_each = f"""
        for path in files:
            sample = open(path).read()
            content = f"Sample: {{sample}}. {LONG}"
            client.chat.completions.create(model="m", messages=[{{"role": "user", "content": content}}])
    """
    assert_lints(HEAD + one_each)
    for add in ("samples += open(path).read()", "samples = samples + open(path).read()"):
        gathered = f"""
        samples = ""
        for path in files:
            {add}
        content = f"Samples: {{samples}}. {LONG}"
        client.chat.completions.create(model="m", messages=[{{"role": "user", "content": content}}])
    """
        # every listed file in one prompt: listing order and shuffle both reorder the prompt
        assert_lints(HEAD + gathered, "KV203", "KV204")


def _template(text: str) -> str:
    return f"""
        from langchain_core.prompts import PromptTemplate

        prompt = PromptTemplate.from_template("{text}")
        """


def test_a_capitalised_slot_is_a_constant_unless_its_name_says_per_request():
    assert_lints(
        _template(f"Only these tasks are available: {{TASK_DESCRIPTIONS}}. {LONG} Instruction: {{instruction}}")
    )
    assert_lints(_template(f"Question: {{QUESTION}}. {LONG}"), "KV101")
    assert_lints(
        _template(f"Only these tasks are available: {{task_descriptions}}. {LONG} Instruction: {{x}}"), "KV101"
    )


def test_a_tool_catalogue_slot_is_set_up_once():
    assert_lints(_template(f"Tool list: {{Tool_dic}}. {LONG} Question: {{question}}"))
    assert_lints(_template(f"API documentation: {{api_dic}}. {LONG} Question: {{question}}"), "KV101")


def test_a_language_or_count_slot_is_a_setting():
    assert_lints(_template(f"Answer in the {{language}} language. {LONG}"))
    assert_lints(_template(f"List at most {{max_items}} items. {LONG}"))
    assert_lints(_template(f"Answer in the {{language}} language. Objective: {{goal}}. {LONG}"), "KV101")


# Two halves of one block of instructions, each under 64 tokens, together over it.
RULES_HEAD = (
    "Extract the payee, the city, the total cost and the invoice date from the text above. The total "
    "cost is the price including tax, written without a currency sign, and the city is the city of the"
)
RULES_TAIL = (
    "recipient, never the sender. Return one JSON object with exactly these four keys and nothing "
    "else: no code fences, no explanations, and an empty string for any value that cannot be found."
)


def _ocr(body: str) -> str:
    return f'''
        COMMON_PROMPT = "Here are the OCR results of one invoice."

        EXTRACT_PROMPT = COMMON_PROMPT + """
        {body}"""
        '''


def test_a_prompt_constant_joined_from_pieces_is_a_template_and_a_language_slot_does_not_split_it():
    assert estimate_tokens(RULES_HEAD) < 64 and estimate_tokens(RULES_TAIL) < 64
    rules = f"{RULES_HEAD} answer in {{language}}, {RULES_TAIL}"
    assert_lints(_ocr("OCR data: {ocr_result} " + rules), "KV101")  # the per-invoice text before the rules
    # split by a value that is not a setting: two short blocks
    assert_lints(_ocr("OCR data: {ocr_result} " + rules.replace("{language}", "{tone}")))
    assert_lints(_ocr(rules + " OCR data: {ocr_result}"))  # the invoice last: clean


def test_double_brace_slots_of_a_template_filled_by_replace():
    source = """
        SYSTEM_PROMPT = \"\"\"You write prompts for agents. The agent is assigned this task:
        {{task}}
        LONG
        The plan tree has a depth of at most {{max_plan_depth}}.\"\"\"

        def fill(prompt, values):
            for key, value in values.items():
                prompt = prompt.replace("{{" + key + "}}", str(value))
            return prompt
        """.replace("LONG", LONG)
    assert_lints(source, "KV101")  # the per-request task before the fixed instructions
    # the task last, after the instructions: clean
    assert_lints(source.replace("{{task}}", "").replace("depth of at most", "task {{task}}, depth at most"))
    # a format string (it has a `{field}`): its doubled braces are literal braces, not slots
    assert_lints(f'''SYSTEM_PROMPT = """Write {{{{task}}}} where the task goes. {LONG} Language: {{lang_code}}"""''')
