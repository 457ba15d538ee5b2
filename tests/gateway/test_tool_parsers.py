"""Tool-call parsers on model-formatted strings of each family: several calls, text around them,
malformed output returned as text."""

from __future__ import annotations

import json

import pytest

from radixgate.gateway.features.tool_parsers import PARSER_NAMES, detect_parser, get_parser

TOOLS = {"get_weather", "add"}


def _calls(result) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in result.calls]


def test_hermes_qwen25_several_calls_and_text_around() -> None:
    text = (
        "Let me check.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\nDone.'
    )
    for name in ("qwen25", "hermes"):
        result = get_parser(name).parse(text, TOOLS)
        assert _calls(result) == [("get_weather", {"city": "Paris"}), ("add", {"a": 1, "b": 2})]
        assert result.content == "Let me check.\n\n\nDone."


def test_hermes_unclosed_last_block_and_string_arguments() -> None:
    text = '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 3}"}'
    assert _calls(get_parser("qwen25").parse(text, TOOLS)) == [("add", {"a": 3})]


def test_llama3_python_tag_and_semicolons() -> None:
    text = (
        'Sure. <|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}; '
        '{"name": "add", "parameters": {"a": 1}}'
    )
    for name in ("llama3", "llama3_json"):
        result = get_parser(name).parse(text, TOOLS)
        assert _calls(result) == [("get_weather", {"city": "Oslo"}), ("add", {"a": 1})]
        assert result.content == "Sure."
    bare = get_parser("llama3").parse('{"name": "add", "parameters": {"a": 2, "b": 5}}', TOOLS)
    assert _calls(bare) == [("add", {"a": 2, "b": 5})] and bare.content is None


def test_mistral_array_and_args_forms() -> None:
    text = (
        'Checking [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Rome"}}, '
        '{"name": "add", "arguments": {"a": 4}}]'
    )
    result = get_parser("mistral").parse(text, TOOLS)
    assert _calls(result) == [("get_weather", {"city": "Rome"}), ("add", {"a": 4})]
    assert result.content == "Checking"
    newer = get_parser("mistral").parse(
        '[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]get_weather[ARGS]{"city": "X"}', TOOLS
    )
    assert _calls(newer) == [("add", {"a": 1}), ("get_weather", {"city": "X"})]


@pytest.mark.parametrize(
    "name, text",
    [
        ("qwen25", '<tool_call>\n{"name": "add", "arguments": {"a": 1</tool_call>'),  # broken JSON
        ("qwen25", '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'),  # not offered
        ("qwen25", '<tool_call>\n["add"]\n</tool_call>'),  # not an object
        ("llama3", '{"name": "add", "parameters": {"a": '),  # truncated
        ("llama3", '<|python_tag|>{"name": "add", "parameters": 5}'),  # arguments not an object
        ("mistral", "[TOOL_CALLS] [{'name': 'add'}]"),  # Python, not JSON
        ("mistral", "[TOOL_CALLS] whatever"),
    ],
)
def test_malformed_output_is_returned_as_text(name: str, text: str) -> None:
    result = get_parser(name).parse(text, TOOLS)
    assert result.calls == [] and result.content == text


def test_plain_text_is_content_for_every_parser() -> None:
    for name in PARSER_NAMES:
        result = get_parser(name).parse("  The answer is 4.  ", TOOLS)
        assert result.calls == [] and result.content == "The answer is 4."


def test_streaming_holds_text_from_where_a_call_may_start() -> None:
    hermes = get_parser("hermes")
    assert hermes.hold_from("Hello <tool_") == 6
    assert hermes.hold_from("Hello <tool_call>{") == 6
    assert hermes.hold_from("Hello") is None
    assert get_parser("llama3").hold_from("  {") == 0
    assert get_parser("llama3").hold_from("Hi <|python") == 3
    assert get_parser("mistral").hold_from("ok [TOOL") == 3


def test_parser_chosen_from_template_or_family() -> None:
    assert detect_parser("...<tool_call>...") == "qwen25"
    assert detect_parser("...[TOOL_CALLS]...") == "mistral"
    assert detect_parser("...<|python_tag|>...") == "llama3"
    assert detect_parser(None, "LlamaForCausalLM") == "llama3"
    assert detect_parser(None, "MistralForCausalLM") == "mistral"
    assert detect_parser(None, "Qwen2ForCausalLM") == "qwen25"
    with pytest.raises(ValueError, match="use one of"):
        get_parser("pythonic")
