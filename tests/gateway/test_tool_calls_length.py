"""A tool call cut by `max_tokens` comes back as a tool call with the arguments written so far and
`finish_reason: "length"`, whole and streamed, forced or parsed, and no markup reaches `content`;
checked on the parsers and plans, then through the `openai` client and LangChain over the shared engine."""

from __future__ import annotations

import json

import openai
import pytest
from fastapi.testclient import TestClient

from radixgate.gateway.features.tool_calls import ToolPlan
from radixgate.gateway.features.tool_parsers import get_parser, parse_call_array

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
TWO_TOOLS = TOOLS + [{"type": "function", "function": {"name": "get_time", "parameters": WEATHER}}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def _plan(tool_choice, tools=TOOLS) -> ToolPlan:
    return ToolPlan.of(tools, tool_choice, True, get_parser("qwen25"))


def _calls(calls: list[dict]) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[{"name": "get_weather", "parameters": {"city": "Par', [("get_weather", '{"city": "Par')]),
        ('[{"name": "get_weather", "parameters": {"city": "P"}', [("get_weather", '{"city": "P"}')]),
        ('[{"nam', [("get_weather", "")]),  # one tool offered: the grammar can only be writing it
        ("[", [("get_weather", "")]),
        (
            '[{"name": "get_weather", "parameters": {"city": "P", "days": 1}}, {"name": "get_weather", "par',
            [("get_weather", '{"city": "P", "days": 1}'), ("get_weather", "")],
        ),
    ],
)
def test_required_cut_is_a_call_with_partial_arguments(text: str, expected: list) -> None:
    content, calls, finish = _plan("required").result(text, "length")
    assert content is None and finish == "length"
    assert _calls(calls) == expected


def test_required_cut_before_an_ambiguous_name_is_no_call_and_no_wrapper() -> None:
    content, calls, finish = _plan("required", TWO_TOOLS).result('[{"name": "get_', "length")
    assert (content, calls, finish) == (None, [], "length")
    _, calls, _ = _plan("required", TWO_TOOLS).result('[{"name": "get_t', "length")
    assert _calls(calls) == [("get_time", "")]  # the only offered name it starts


def test_named_cut_is_a_call_whole_and_streamed() -> None:
    plan = _plan(NAMED)
    content, calls, finish = plan.result('{"city": "Pa', "length")
    assert content is None and finish == "length" and _calls(calls) == [("get_weather", '{"city": "Pa')]
    stream = plan.stream()
    deltas = stream.feed('{"city"') + stream.feed(': "Pa')
    tail, finish = stream.finish("length")
    assert finish == "length" and not any("content" in d for d in deltas + tail)
    assert "".join(p["function"]["arguments"] for d in deltas for p in d["tool_calls"]) == '{"city": "Pa'


def test_required_cut_streams_the_call_and_no_content() -> None:
    stream = _plan("required").stream()
    deltas = stream.feed('[{"name": "get_weather", ') + stream.feed('"parameters": {"days": 3')
    tail, finish = stream.finish("length")
    assert finish == "length" and not any("content" in d for d in deltas + tail)
    heads = [p for d in tail for p in d["tool_calls"] if "id" in p]
    assert [h["function"]["name"] for h in heads] == ["get_weather"]
    assert "".join(p["function"].get("arguments", "") for d in tail for p in d["tool_calls"]) == '{"days": 3'


@pytest.mark.parametrize(
    "parser, text, content",
    [
        ("qwen25", 'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Ro', "Checking."),
        ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Ro', None),
        ("llama3", '{"name": "get_weather", "parameters": {"city": "Ro', None),
        ("mistral", 'Sure [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Ro', "Sure"),
        ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Ro', None),
    ],
)
def test_auto_cut_call_is_a_call_in_each_family(parser: str, text: str, content: str | None) -> None:
    plan = ToolPlan.of(TOOLS, "auto", True, get_parser(parser))
    got_content, calls, finish = plan.result(text, "length")
    assert (got_content, _calls(calls), finish) == (content, [("get_weather", '{"city": "Ro')], "length")


@pytest.mark.parametrize(
    "parser, text",
    [("qwen25", "Hi <tool_call>\n{"), ("llama3", '<|python_tag|>{"na'), ("mistral", "Hi [TOOL_CALLS] [{")],
)
def test_auto_cut_before_the_name_drops_the_markup(parser: str, text: str) -> None:
    plan = ToolPlan.of(TWO_TOOLS, "auto", True, get_parser(parser))
    content, calls, finish = plan.result(text, "length")
    assert calls == [] and finish == "length"
    assert content in (None, "Hi")


def test_auto_cut_text_without_a_call_stays_text() -> None:
    plan = _plan("auto")
    assert plan.result("Just words, cut", "length") == ("Just words, cut", [], "length")
    assert plan.result('Hi <tool_call>{"name": "get_weather", "argu', "stop")[1] == []  # malformed, not cut


def test_call_array_helper_without_cut_is_strict() -> None:
    assert [c.name for c in parse_call_array('[{"name": "a", "arguments": {}}]', None)] == ["a"]
    with pytest.raises(ValueError):
        parse_call_array('[{"name": "a"', None)


# Through the clients users run, over the shared tiny engine (its grammar forces the call's shape).


def _openai(client: TestClient) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=client, max_retries=0)


@pytest.mark.parametrize("tool_choice, max_tokens", [("required", 26), (NAMED, 8)], ids=["required", "named"])
def test_openai_client_gets_the_cut_call_whole_and_streamed(client: TestClient, tool_choice, max_tokens) -> None:
    api = _openai(client)
    ask = {"model": "tiny", "tools": TOOLS, "tool_choice": tool_choice, "max_tokens": max_tokens}
    messages = [{"role": "user", "content": "Weather in Paris for the week?"}]
    whole = api.chat.completions.create(messages=messages, **ask).choices[0]
    assert whole.finish_reason == "length" and whole.message.content is None
    (call,) = whole.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert call.function.arguments.startswith('{"') and '"name"' not in call.function.arguments
    with pytest.raises(json.JSONDecodeError):
        json.loads(call.function.arguments)  # cut: what was written so far

    names, arguments, content, finish = [], "", "", None
    for chunk in api.chat.completions.create(messages=messages, stream=True, **ask):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for piece in choice.delta.tool_calls or []:
                names += [piece.function.name] if piece.function.name else []
                arguments += piece.function.arguments or ""
            finish = choice.finish_reason or finish
    assert (names, content, finish) == (["get_weather"], "", "length")
    assert arguments.startswith('{"') and '"name"' not in arguments


@pytest.mark.parametrize("tool_choice", ["get_weather", "any"])
def test_langchain_bind_tools_gets_the_cut_call(client: TestClient, tool_choice: str) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str, days: int) -> str:
        """The forecast for a city."""
        return city

    chat = ChatOpenAI(
        model="tiny", base_url=f"{client.base_url}/v1", api_key="unused", http_client=client, max_tokens=26
    )
    bound = chat.bind_tools([get_weather], tool_choice=tool_choice)
    message = bound.invoke("Weather in Rome for three days?")
    assert message.response_metadata["finish_reason"] == "length" and message.content == ""
    # Cut arguments do not parse, so LangChain files the call as invalid: present, never lost.
    assert [c["name"] for c in message.tool_calls + message.invalid_tool_calls] == ["get_weather"]
    merged = None
    for chunk in bound.stream("Weather in Rome for three days?"):
        merged = chunk if merged is None else merged + chunk
    assert merged is not None and merged.content == ""
    assert [c["name"] for c in merged.tool_call_chunks] == ["get_weather"]
    assert merged.response_metadata["finish_reason"] == "length"
