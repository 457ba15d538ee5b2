"""Structured output and tool calls through clients nobody here wrote (the `openai` package,
LangChain, plain HTTP in SGLang's `/generate` shape) against a real `radixgate serve` on the
random-weight tiny model at temperature 1.0: whatever the model wants, the output matches."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pytest
from live_servers import KEYLESS
from pydantic import BaseModel, Field

from radixgate.gateway.server_process import ServerProcess


class Item(BaseModel):
    """The bounded schema: an enum, a boolean, an integer 0-99, a string of at most 16 characters."""

    color: Literal["red", "green", "blue"]
    ok: bool
    n: int = Field(ge=0, le=99)
    name: str = Field(max_length=16)


UNBOUNDED = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "score": {"type": "number"},
    },
    "required": ["title", "tags", "score"],
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
ADD = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 9},
        "b": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "description": "Adds two digits", "parameters": ADD}},
]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
MESSAGES = [{"role": "user", "content": "What will the weather be in Oslo for the next three days?"}]


@pytest.fixture
def server(live_server: Callable[..., ServerProcess]) -> Iterator[ServerProcess]:
    running = live_server(KEYLESS)  # shared with other files; every test leaves it idle, nothing leaked
    yield running
    assert httpx.get(f"{running.base_url}/debug/check_idle_invariant", timeout=30).status_code == 200


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=600)


def _parallel(fn: Any, n: int, workers: int = 16) -> list[Any]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, range(n)))


def _is_prefix(schema: dict[str, Any], text: str) -> bool:
    """A length-cut output must be a prefix of some document of the schema's grammar (compact JSON)."""
    import xgrammar as xgr

    info = xgr.TokenizerInfo([])  # accept_string checks characters; no vocabulary needed
    grammar = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(schema), any_whitespace=False)
    return xgr.GrammarMatcher(grammar, terminate_without_stop_token=True).accept_string(text)


def test_parse_bounded_schema_50_of_50(client: openai.OpenAI) -> None:
    def ask(i: int) -> Any:
        return client.chat.completions.parse(
            model="tiny",
            messages=[{"role": "user", "content": f"Describe item {i} as JSON."}],
            response_format=Item,
            temperature=1.0,
            max_tokens=256,
        )

    replies = _parallel(ask, 50, workers=50)
    parsed = [r.choices[0].message.parsed for r in replies]
    assert all(isinstance(p, Item) for p in parsed)
    assert all(r.choices[0].finish_reason == "stop" for r in replies)
    assert len({p.model_dump_json() for p in parsed}) > 10  # sampled, not one fixed answer


def test_unbounded_outputs_validate_or_are_valid_prefixes(client: openai.OpenAI) -> None:
    cases = {
        "json_schema": (UNBOUNDED, {"type": "json_schema", "json_schema": {"name": "doc", "schema": UNBOUNDED}}),
        "json_object": ({"type": "object"}, {"type": "json_object"}),
    }

    def ask(i: int) -> tuple[str, Any]:
        kind = "json_schema" if i % 2 else "json_object"  # both kinds in one batch
        reply = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": f"Document {i}, as JSON please."}],
            response_format=cases[kind][1],
            temperature=1.0,
            max_tokens=256,
        )
        return kind, reply

    for kind, reply in _parallel(ask, 6):
        schema, choice = cases[kind][0], reply.choices[0]
        if choice.finish_reason == "stop":  # the grammar ended the document before the budget
            assert reply.usage.completion_tokens <= 256, reply.usage
            jsonschema.validate(json.loads(choice.message.content), schema)
        else:  # cut by max_tokens: exactly the budget, and a prefix of a valid document
            assert choice.finish_reason == "length", choice.finish_reason
            assert reply.usage.completion_tokens == 256, reply.usage
            assert _is_prefix(schema, choice.message.content), choice.message.content


def test_generate_regex_200_of_200(server: ServerProcess) -> None:
    def ask(i: int) -> dict[str, Any]:
        body = {
            "text": f"Caller {i} phone number:",
            "sampling_params": {"regex": r"[0-9]{3}-[0-9]{4}", "temperature": 1.0, "max_new_tokens": 32},
        }
        return httpx.post(f"{server.base_url}/generate", json=body, timeout=600).json()

    outs = _parallel(ask, 200, workers=64)
    assert all(re.fullmatch(r"[0-9]{3}-[0-9]{4}", o["text"]) for o in outs), [o["text"] for o in outs][:5]
    assert all(o["meta_info"]["finish_reason"]["type"] == "stop" for o in outs)
    assert len({o["text"] for o in outs}) > 100


def test_uncompilable_schema_is_a_400_saying_why(client: openai.OpenAI) -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/definitions/nowhere"}}}
    with pytest.raises(openai.BadRequestError, match="cannot be compiled.*nowhere"):
        client.chat.completions.create(model="tiny", messages=MESSAGES, response_format=bad, max_tokens=8)


def _check_calls(calls: list[Any], allowed: set[str]) -> None:
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize(
    "tool_choice",
    ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named"],
)
def test_forced_tool_calls_whole_and_streamed(client: openai.OpenAI, tool_choice: Any) -> None:
    allowed = {"get_weather"} if isinstance(tool_choice, dict) else set(SCHEMAS)
    kwargs = dict(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice, temperature=1.0)
    kwargs.update(max_tokens=256, parallel_tool_calls=False)
    reply = client.chat.completions.create(**kwargs)
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.choices[0].message.content is None
    _check_calls(reply.choices[0].message.tool_calls, allowed)

    calls: dict[int, dict[str, Any]] = {}
    reasons = []
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for choice in chunk.choices:
            reasons.append(choice.finish_reason)
            for piece in choice.delta.tool_calls or []:
                if piece.id is not None:  # a call's first delta: id, type and name
                    calls[piece.index] = {"id": piece.id, "name": piece.function.name, "arguments": ""}
                calls[piece.index]["arguments"] += piece.function.arguments or ""
    assert reasons[-1] == "tool_calls"
    rebuilt = [
        openai.types.chat.ChatCompletionMessageFunctionToolCall(
            id=c["id"], type="function", function={"name": c["name"], "arguments": c["arguments"]}
        )
        for c in calls.values()
    ]
    _check_calls(rebuilt, allowed)


def test_required_parallel_calls_and_auto_never_500(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required", temperature=1.0, max_tokens=48
    )
    choice = reply.choices[0]
    if choice.finish_reason == "tool_calls":  # the model may also run out of tokens mid-array
        _check_calls(choice.message.tool_calls, set(SCHEMAS))
    else:  # cut mid-array: the calls begun, the last with the arguments written so far (as OpenAI does)
        assert choice.finish_reason == "length" and choice.message.content is None
        assert all(call.function.name in SCHEMAS for call in choice.message.tool_calls or [])
    auto = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, temperature=1.0, max_tokens=16)
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")  # random text is content


def test_langchain_structured_output_and_bind_tools(server: ServerProcess) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model="tiny", base_url=server.api_url, api_key="unused", temperature=1.0, max_tokens=256, max_retries=0
    )
    for method in ("json_schema", "function_calling"):
        result = llm.with_structured_output(Item, method=method).invoke("Describe an item.")
        assert isinstance(result, Item), (method, result)

    class Add(BaseModel):
        """Adds two digits."""

        a: int = Field(ge=0, le=9)
        b: int = Field(ge=0, le=9)

    message = llm.bind_tools([Add], tool_choice="any", parallel_tool_calls=False).invoke("What is 2 + 3?")
    assert message.tool_calls and message.tool_calls[0]["name"] == "Add"
    call = Add(**message.tool_calls[0]["args"])  # validated by the tool's own model
    assert 0 <= call.a + call.b <= 18
