"""`/v1/responses` as the `openai` package sends it, in-process (the TestClient is its httpx client)
over the shared engine: string and item inputs with instructions, a forced function tool and its
output round trip, `responses.parse` / `responses.stream` with a bounded pydantic model, the raw
event sequence, retrieve and delete, prompt-cache fields, bad input in OpenAI's error shape, and
`response.failed` after the stream started."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class City(BaseModel):
    name: str = Field(max_length=10)
    population: int = Field(ge=0, le=10**9)


def _sdk(client: TestClient, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{client.base_url}/v1", api_key=api_key, http_client=client, max_retries=0)


def test_string_and_item_inputs_with_instructions(client: TestClient) -> None:
    sdk = _sdk(client)
    plain = sdk.responses.create(model="tiny", input="Name a colour.", max_output_tokens=4, temperature=0)
    assert plain.object == "response" and plain.status == "incomplete" and plain.output_text
    assert plain.incomplete_details is not None and plain.incomplete_details.reason == "max_output_tokens"
    assert plain.usage is not None and plain.usage.output_tokens == 4
    assert (
        plain.usage.total_tokens == plain.usage.input_tokens + 4
        and plain.usage.output_tokens_details.reasoning_tokens == 0
    )
    items = sdk.responses.create(
        model="tiny",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]}],
        max_output_tokens=4,
        temperature=0,
    )
    assert items.output_text == plain.output_text  # the same prompt either way
    instructed = sdk.responses.create(
        model="tiny",
        instructions="You are a painter who answers in one word.",
        input="Name a colour.",
        max_output_tokens=4,
        temperature=0,
        metadata={"prompt_template": "responses-colour"},
    )
    assert instructed.instructions == "You are a painter who answers in one word."
    assert instructed.usage.input_tokens > plain.usage.input_tokens + 5
    templates = {t["template"] for t in client.get("/v1/prompt_stats").json()["templates"]}
    assert "responses-colour" in templates


def test_forced_function_tool(client: TestClient) -> None:
    sdk = _sdk(client)
    call = sdk.responses.create(
        model="tiny",
        input="What is the weather in Quito?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=100,
        temperature=0,
    )
    (item,) = call.output
    assert item.type == "function_call" and item.name == "get_weather" and item.call_id.startswith("call_")
    assert set(json.loads(item.arguments)) == {"city"} and call.status == "completed"
    required = sdk.responses.create(
        model="tiny",
        input="Weather, please.",
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=100,
        temperature=0,
    )
    assert [o.type for o in required.output] == ["function_call"]
    answered = sdk.responses.create(
        model="tiny",
        input=[
            {"role": "user", "content": "What is the weather in Quito?"},
            {"type": "function_call", "call_id": item.call_id, "name": item.name, "arguments": item.arguments},
            {"type": "function_call_output", "call_id": item.call_id, "output": "Rainy, 14 C"},
        ],
        tools=[WEATHER],
        max_output_tokens=3,
        temperature=0,
    )
    assert answered.usage.input_tokens > call.usage.input_tokens + 4 and answered.output


def test_parse_and_stream_with_a_json_schema(client: TestClient) -> None:
    sdk = _sdk(client)
    parsed = sdk.responses.parse(
        model="tiny", input="A city as JSON.", text_format=City, max_output_tokens=100, temperature=0
    )
    assert isinstance(parsed.output_parsed, City) and parsed.status == "completed"
    with sdk.responses.stream(
        model="tiny", input="A city as JSON.", text_format=City, max_output_tokens=100, temperature=0
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == parsed.output_text
    assert final.output_parsed == parsed.output_parsed
    forced: dict[str, Any] = {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}}
    with sdk.responses.stream(
        model="tiny", input="Weather in Bern?", max_output_tokens=100, temperature=0, **forced
    ) as stream:
        pieces = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        called = stream.get_final_response()
    (item,) = called.output
    assert item.type == "function_call" and "".join(pieces) == item.arguments and json.loads(item.arguments)


def test_raw_stream_events_are_numbered_in_order(client: TestClient) -> None:
    body = {"model": "tiny", "input": "stream raw", "max_output_tokens": 3, "stream": True}
    r = client.post("/v1/responses", json=body)
    events = [json.loads(b.split("data: ", 1)[1]) for b in r.text.split("\n\n") if "data: " in b]
    kinds = [e["type"] for e in events]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",  # max_output_tokens ended it, as OpenAI reports it
    ]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == text


def test_retrieve_and_delete(client: TestClient) -> None:
    sdk = _sdk(client)
    made = sdk.responses.create(model="tiny", input="Keep me.", max_output_tokens=2, temperature=0)
    got = sdk.responses.retrieve(made.id)
    assert got.id == made.id and got.output_text == made.output_text and got.usage == made.usage
    sdk.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(made.id)


def test_prompt_cache_fields(client: TestClient) -> None:
    sdk = _sdk(client)
    base: dict[str, Any] = {"model": "tiny", "input": "cache fields", "max_output_tokens": 1}
    kept = sdk.responses.create(**base, prompt_cache_key="tenant-prefix", prompt_cache_retention="24h")
    assert kept.prompt_cache_key == "tenant-prefix" and kept.prompt_cache_retention == "24h"
    asked = client.post("/v1/responses", json={**base, "prompt_cache_options": {"comparison_response_id": kept.id}})
    # the same prompt: a hit (the other answers: test_cache_diagnostics_wire.py)
    assert asked.json()["prompt_cache_diagnostics"]["type"] == "cache_hit"
    assert "prompt_cache_diagnostics" not in client.post("/v1/responses", json=base).json()
    for field, value in [
        ("prompt_cache_options", {"ttl": "forever"}),  # "30m" pins: test_retention_routes.py
        ("prompt_cache_options", {"mode": "explicit"}),
        ("prompt_cache_retention", "7d"),
    ]:
        refused = client.post("/v1/responses", json={**base, field: value})
        assert refused.status_code == 400 and refused.json()["error"]["param"].startswith(field), refused.text
    implicit = client.post("/v1/responses", json={**base, "prompt_cache_options": {"mode": "implicit"}})
    assert implicit.status_code == 200


def test_sampling_fields_are_honoured(client: TestClient) -> None:
    sdk = _sdk(client)

    def text(**sampling: Any) -> str:
        return sdk.responses.create(model="tiny", input="Sample words.", max_output_tokens=6, **sampling).output_text

    greedy = text(temperature=0)
    assert len({text(temperature=1.0) for _ in range(4)}) > 1
    assert text(temperature=1.0, top_p=1e-6) == greedy


def test_bad_input_is_a_400_naming_it(client: TestClient) -> None:
    sdk = _sdk(client)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"input": [{"type": "reasoning", "summary": []}]}, "input.0.type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input.0.content.0.type",
        ),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "reasoning": {"effort": "high"}}, "reasoning"),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format"),
        (
            {"input": "x", "tools": [WEATHER], "tool_choice": "required", "text": {"format": {"type": "json_object"}}},
            "text.format",
        ),
        ({"input": "x", "previous_response_id": "resp_unknown"}, "previous_response_id"),
        ({}, "input"),
    ]
    for kwargs, named in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.responses.create(model="tiny", max_output_tokens=1, **kwargs)
        error = caught.value.body
        assert error["param"] == named and error["message"], (named, error)
    unknown = client.post("/v1/responses", json={"model": "tiny", "input": "x", "previous_response_id": "resp_x"})
    assert unknown.json()["error"]["code"] == "previous_response_not_found"


def test_a_failure_after_the_stream_started_is_response_failed(client: TestClient, worker, monkeypatch) -> None:
    def broken(ids: list[int], skip_special_tokens: bool = True) -> str:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "broken bytes")

    monkeypatch.setattr(worker.engine.detokenizer, "decode", broken)
    r = client.post(
        "/v1/responses", json={"model": "tiny", "input": "fail late", "max_output_tokens": 3, "stream": True}
    )
    events = [json.loads(b.split("data: ", 1)[1]) for b in r.text.split("\n\n") if "data: " in b]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "request_failed"
