"""KV301: a static prefix shorter than the provider's minimum cacheable length (opt-in)."""

from promptlint_assert import assert_lints

from radixgate.linter import Settings

SHORT = """
    from openai import OpenAI

    def ask(client: OpenAI, q):
        return client.chat.completions.create(model="m", messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": q}])
    """


def test_kv301_is_opt_in():
    assert_lints(SHORT)


def test_short_prefix_counts_cl100k_tokens():
    found = assert_lints(SHORT, "KV301", settings=Settings(extend_select=("KV301",)))
    assert "static prefix is 6 tokens" in found[0].message
    assert found[0].severity == "info"


def test_threshold_is_configurable_and_long_prefixes_pass():
    assert_lints(SHORT, settings=Settings(extend_select=("KV301",), min_static_tokens=5))
    long_prompt = SHORT.replace("You are a helpful assistant.", "word " * 1100)
    assert_lints(long_prompt, settings=Settings(extend_select=("KV301",)))


def test_prefix_ending_in_an_unknown_system_value_is_not_judged():
    assert_lints(
        """
        from openai import OpenAI
        from app.prompts import SYSTEM

        def ask(client: OpenAI, q):
            return client.chat.completions.create(model="m", messages=[
                {"role": "system", "content": "Hi. " + SYSTEM}, {"role": "user", "content": q}])
        """,
        settings=Settings(extend_select=("KV301",)),
    )


def test_langchain_templates_have_no_provider_and_are_not_judged():
    assert_lints(
        """
        from langchain_core.prompts import PromptTemplate

        prompt = PromptTemplate.from_template("Be brief. {question}")
        """,
        settings=Settings(select=("KV",)),
    )
