"""KV101-KV104: dynamic values placed before static text, documents or cache breakpoints."""

from promptlint_assert import LONG, assert_lints

from radixgate.linter import Settings


def test_timestamp_before_system_prompt_is_kv101_at_the_value():
    found = assert_lints(
        f"""
        from datetime import datetime
        from openai import OpenAI

        def reply(client: OpenAI, question):
            system = f"Now: {{datetime.now()}}. {LONG * 4}"
            return client.chat.completions.create(model="m", messages=[
                {{"role": "system", "content": system}}, {{"role": "user", "content": question}}])
        """,
        "KV101",
    )
    v = found[0]
    assert (v.row, v.col) == (6, 22) and v.severity == "error"  # per request, a long block lost
    assert "datetime.now()" in v.message and "changes every request" in v.message


def test_severity_follows_how_often_the_value_changes():
    found = assert_lints(
        f"""
        from datetime import date
        from openai import OpenAI

        def reply(client: OpenAI, user_id, question):
            system = f"{{date.today()}} {{user_id}} {LONG}"
            return client.chat.completions.create(model="m", messages=[
                {{"role": "system", "content": system}}, {{"role": "user", "content": question}}])
        """,
        "KV101",
        "KV101",
    )
    # One step lower than the change alone says: the block pushed out is under 4 x 64 tokens.
    assert [v.severity for v in found] == ["info", "info"]
    assert "tokens of static text" in found[0].message


def test_dynamic_value_after_all_static_text_is_clean():
    assert_lints(f'''
        from datetime import datetime
        from openai import OpenAI

        def reply(client: OpenAI, question):
            return client.chat.completions.create(model="m", messages=[
                {{"role": "system", "content": "{LONG}" + f" Now: {{datetime.now()}}"}},
                {{"role": "user", "content": question}}])
        ''')


def test_module_level_time_changes_per_process_not_per_request():
    assert_lints(f"""
        from datetime import datetime
        import openai

        BOOT = datetime.now()
        SYSTEM = f"Booted {{BOOT}}. {LONG}"

        def reply(q):
            return openai.ChatCompletion.create(model="m", messages=[
                {{"role": "system", "content": SYSTEM}}, {{"role": "user", "content": q}}])
        """)


def test_module_level_call_inside_a_loop_is_per_request():
    assert_lints(
        f"""
        from datetime import datetime
        from openai import OpenAI

        client = OpenAI()
        for q in ["a", "b"]:
            client.chat.completions.create(model="m", messages=[
                {{"role": "system", "content": f"{{datetime.now()}} {LONG}"}},
                {{"role": "user", "content": q}}])
        """,
        "KV101",
    )


def test_strftime_with_explicit_time_is_not_dynamic():
    assert_lints(f"""
        import time
        from openai import OpenAI

        def reply(client: OpenAI, q, release):
            system = time.strftime("%Y-%m-%d", release) + " {LONG}"
            return client.chat.completions.create(model="m", messages=[
                {{"role": "system", "content": system}}, {{"role": "user", "content": q}}])
        """)


def test_short_static_tail_after_the_question_is_not_reported():
    assert_lints("""
        from openai import OpenAI

        def ask(client: OpenAI, question):
            return client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": f"{question}\\n\\nAnswer in one word."}])
        """)


def test_min_lost_tokens_setting_changes_the_threshold():
    source = """
        from openai import OpenAI

        def ask(client: OpenAI, question):
            return client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": f"{question}\\n\\nAnswer in one word."}])
        """
    assert_lints(source)  # a one-line trailer is not worth caching by default
    assert_lints(source, "KV101", settings=Settings(min_lost_tokens=3))


def test_langchain_placeholder_filled_per_request_in_another_function():
    found = assert_lints(
        f"""
        from datetime import datetime
        from langchain_core.prompts import ChatPromptTemplate

        def build():
            return ChatPromptTemplate.from_messages([
                ("system", "Today is {{today}}. {LONG}"),
                ("human", "{{question}}"),
            ])

        def answer(llm, q):
            return (build() | llm).invoke({{"today": datetime.now().isoformat(), "question": q}})
        """,
        "KV101",
    )
    assert found[0].row == 7  # the placeholder inside the template


def test_langchain_partial_with_callable_and_static_partial():
    assert_lints(
        f"""
        from datetime import datetime
        from langchain_core.prompts import PromptTemplate

        prompt = PromptTemplate.from_template("{{time}} {{fmt}} {LONG} {{question}}")
        prompt = prompt.partial(time=lambda: str(datetime.now()), fmt="Reply in JSON.")
        """,
        "KV101",
    )


def test_langchain_good_template_is_clean():
    assert_lints(f'''
        from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

        prompt = ChatPromptTemplate.from_messages([
            ("system", "{LONG} Context: {{context}}"),
            MessagesPlaceholder("history"),
            ("human", "{{question}} (asked at {{now}})"),
        ])
        ''')


def test_dynamic_at_end_of_system_prompt_before_few_shot_is_kv102():
    found = assert_lints(
        f'''
        from openai import OpenAI

        SHOTS = [{{"role": "user", "content": "{LONG}"}}, {{"role": "assistant", "content": "ok"}}]

        def ask(client: OpenAI, session_id, q):
            return client.chat.completions.create(model="m", messages=[
                {{"role": "system", "content": "Be brief. Session " + session_id}},
                *SHOTS, {{"role": "user", "content": q}}])
        ''',
        "KV102",
    )
    assert found[0].severity == "info"  # per session, and under 256 tokens pushed out


def test_question_before_document_is_kv103_and_document_first_is_clean():
    assert_lints(
        """
        MANUAL = open("manual.txt").read()

        def prompt(question):
            return {"role": "user", "content": f"Q: {question}\\n\\nDoc:\\n{MANUAL}"}

        def build(question, path):
            document = open(path).read()
            messages = [{"role": "user", "content": f"Q: {question}\\n\\nDoc:\\n{document}"}]
            return messages
        """,
        "KV103",
        "KV103",
    )
    assert_lints("""
        def build(question, document):
            messages = [{"role": "user", "content": f"Doc:\\n{document}\\n\\nQ: {question}"}]
            return messages
        """)


def test_dynamic_before_cache_control_breakpoint_is_kv104():
    assert_lints(
        f"""
        import anthropic
        import uuid

        def ask(client: anthropic.Anthropic, q):
            return client.messages.create(model="c", max_tokens=9, messages=[
                {{"role": "user", "content": [
                    {{"type": "text", "text": f"{{uuid.uuid4()}} {LONG}", "cache_control": {{"type": "ephemeral"}}}},
                    {{"type": "text", "text": q}}]}}])
        """,
        "KV104",
    )


def test_radixgate_prompt_is_a_safe_sink():
    assert_lints("""
        from datetime import datetime
        import radixgate
        from radixgate import Prompt

        def ask(client, user_id, question, docs):
            p = Prompt(template="support").turn(f"{datetime.now()} {user_id}")
            p.static("You are a meticulous support assistant for Acme. Answer in three sentences.")
            q = radixgate.Prompt().turn(f"now {datetime.now()}").static("x" * 200)
            return client.chat(p), client.chat(q)
        """)


def test_noqa_and_disable_comments_suppress():
    assert_lints(
        f'''
        from datetime import datetime
        import openai

        def ask(q):
            system_a = f"{{datetime.now()}} {LONG}"  # noqa: KV101
            system_b = f"""{{datetime.now()}}
            {LONG}"""  # promptlint: disable=KV101
            system_c = f"{{datetime.now()}} {LONG}"  # noqa
            system_d = f"{{datetime.now()}} {LONG}"  # noqa: KV2
            return system_a, system_b, system_c, system_d
        ''',
        "KV101",
    )


def test_low_confidence_prompt_variable_reports_only_strong_values():
    assert_lints(
        f"""
        from datetime import datetime

        def build(name):
            system_prompt = f"Now {{datetime.now()}}. {LONG}"
            template = f"{{name}} {LONG}"
            return system_prompt, template
        """,
        "KV101",
    )


def test_timestamp_before_the_history_is_kv101_and_after_it_is_clean():
    found = assert_lints(
        """
        import time

        def build(system_prompt, conversation_history):
            messages = [{"role": "system", "content": system_prompt}]
            messages.append({"role": "system", "content": f"Now: {time.strftime('%H:%M')}"})
            messages.extend(conversation_history)
            return messages
        """,
        "KV101",
    )
    assert found[0].message.endswith("before the conversation history")
    assert_lints(
        f'''
        from datetime import datetime

        def build(history, q):
            messages = [{{"role": "system", "content": "{LONG}"}}]
            messages.extend(history)
            messages.insert(1, {{"role": "system", "content": f"Now: {{datetime.now()}}"}})
            return messages
        ''',
        "KV101",
    )
    assert_lints(f'''
        from datetime import datetime

        def build(history, q):
            messages = [{{"role": "system", "content": "{LONG}"}}, *history]
            messages.insert(-1, {{"role": "user", "content": "Earlier turns above."}})
            messages.append({{"role": "user", "content": f"{{q}} (now {{datetime.now()}})"}})
            return messages
        ''')
