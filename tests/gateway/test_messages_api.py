"""`/v1/messages` as the `anthropic` package sends it, in-process (the TestClient is its httpx client)
over the shared engine: system blocks with cache_control and the usage they account, a forced tool
call and its tool_result round trip, the SDK's stream helper assembling text and tool-use deltas,
count_tokens, Anthropic's error shape (BadRequestError, AuthenticationError), cache_control checks,
diagnostics, stop sequences, prompt tags in headers, and an error event after the stream started."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest
from fastapi.testclient import TestClient

TEMPERATURE_0 = {"temperature": 0}  # anthropic 2.x's create() has no temperature keyword; the API takes it
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def _sdk(client: TestClient, api_key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=str(client.base_url), api_key=api_key, http_client=client, max_retries=0)


def _prompt_tokens(usage: Any) -> int:
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def test_system_blocks_with_cache_control_account_creation_then_reads(client: TestClient, long_prefix) -> None:
    sdk = _sdk(client)
    system = [
        {"type": "text", "text": long_prefix("msg-sys", 8), "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": " Answer briefly."},
    ]
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    counted = sdk.messages.count_tokens(model="tiny", system=system, messages=messages).input_tokens
    first = sdk.messages.create(model="tiny", max_tokens=4, system=system, messages=messages, extra_body=TEMPERATURE_0)
    assert first.type == "message" and first.role == "assistant" and first.content[0].type == "text"
    assert first.stop_reason == "max_tokens" and first.usage.output_tokens == 4
    assert _prompt_tokens(first.usage) == counted
    # the breakpoint ends inside the system turn: most of the prompt, not all of it
    assert 0.5 * counted < first.usage.cache_creation_input_tokens < counted
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == first.usage.cache_creation_input_tokens
    # only the template's opening tokens (`<|im_start|>system\n`) may be cached from other prompts
    assert first.usage.cache_read_input_tokens < 5 and first.usage.input_tokens > 0
    again = sdk.messages.create(model="tiny", max_tokens=4, system=system, messages=messages, extra_body=TEMPERATURE_0)
    assert again.usage.cache_read_input_tokens >= first.usage.cache_creation_input_tokens
    assert again.usage.cache_creation_input_tokens == 0 and _prompt_tokens(again.usage) == counted
    assert again.content[0].text == first.content[0].text  # greedy


def test_forced_tool_call_then_tool_result_round_trip(client: TestClient) -> None:
    sdk = _sdk(client)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Oslo today?"}]
    call = sdk.messages.create(
        model="tiny",
        max_tokens=100,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=messages,
        extra_body=TEMPERATURE_0,
    )
    assert call.stop_reason == "tool_use"
    (block,) = call.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.id.startswith("toolu_")
    assert set(block.input) == {"city"} and isinstance(block.input["city"], str) and len(block.input["city"]) <= 8
    messages += [
        {"role": "assistant", "content": [block.model_dump(include={"type", "id", "name", "input"})]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "Sunny, 21 C"}]},
    ]
    answer = sdk.messages.create(
        model="tiny", max_tokens=3, tools=[WEATHER], messages=messages, extra_body=TEMPERATURE_0
    )
    assert answer.stop_reason in ("max_tokens", "end_turn", "tool_use") and answer.content
    # the round trip's prompt holds the call and its result: it is longer by both
    before = sdk.messages.count_tokens(model="tiny", tools=[WEATHER], messages=messages[:1]).input_tokens
    assert _prompt_tokens(answer.usage) > before + len("Sunny, 21 C") // 4
    forced_any = sdk.messages.create(
        model="tiny",
        max_tokens=100,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=messages[:1],
        extra_body=TEMPERATURE_0,
    )
    assert forced_any.stop_reason == "tool_use" and forced_any.content[-1].type == "tool_use"


def test_stream_helper_assembles_text_and_tool_use(client: TestClient) -> None:
    sdk = _sdk(client)
    messages = [{"role": "user", "content": "Stream me a few words about the sea."}]
    with sdk.messages.stream(model="tiny", max_tokens=6, messages=messages, extra_body=TEMPERATURE_0) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    whole = sdk.messages.create(model="tiny", max_tokens=6, messages=messages, extra_body=TEMPERATURE_0)
    assert "".join(pieces) == final.content[0].text == whole.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 6
    assert _prompt_tokens(final.usage) == _prompt_tokens(whole.usage)

    tool_messages = [{"role": "user", "content": "Weather in Lima, streamed."}]
    with sdk.messages.stream(
        model="tiny",
        max_tokens=100,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=tool_messages,
        extra_body=TEMPERATURE_0,
    ) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_start" in kinds
    assert streamed.stop_reason == "tool_use"
    (block,) = streamed.content
    assert block.type == "tool_use" and block.name == "get_weather" and set(block.input) == {"city"}


def test_raw_event_sequence(client: TestClient) -> None:
    body = {"model": "tiny", "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": "events"}]}
    r = client.post("/v1/messages", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    names = [line[len("event: ") :] for line in r.text.splitlines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert names[2] == "content_block_start" and names[-3] == "content_block_stop"
    assert set(names[3:-3]) == {"content_block_delta"}


def test_bad_requests_are_anthropic_errors(client: TestClient) -> None:
    sdk = _sdk(client)
    user = [{"role": "user", "content": "hi"}]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages.0.content.0.type"),
        ({"messages": user, "extra_body": {"thinking": {"type": "enabled", "budget_tokens": 1024}}}, "thinking"),
        ({"messages": user, "extra_body": {"output_config": {"effort": "high"}}}, "output_config.effort"),
        ({"messages": user, "extra_body": {"no_such_field": 1}}, "no_such_field"),
        ({"messages": user, "metadata": {"prompt_template": "x"}}, "metadata.prompt_template"),
        ({"messages": user, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"messages": user, "extra_body": {"max_tokens": 0}}, "max_tokens"),
        ({"messages": [{"role": "user", "content": []}]}, "messages"),  # a 500 (IndexError) found by schemathesis
        (
            {
                "messages": user,
                "tools": [WEATHER],
                "tool_choice": {"type": "any"},
                "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            },
            "output_config.format",
        ),
    ]
    for kwargs, named in cases:
        with pytest.raises(anthropic.BadRequestError) as caught:
            sdk.messages.create(model="tiny", max_tokens=2, **kwargs)
        body = caught.value.body
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        assert named in body["error"]["message"], (named, body)
    with pytest.raises(anthropic.NotFoundError) as missing:
        sdk.messages.create(model="no-such-model", max_tokens=2, messages=user)
    assert missing.value.body["error"]["type"] == "not_found_error"


def test_cache_control_is_checked_as_anthropic_does(client: TestClient) -> None:
    def post(system: list[dict[str, Any]], **extra: Any) -> Any:
        body = {"model": "tiny", "max_tokens": 1, "system": system, "messages": [{"role": "user", "content": "x"}]}
        return client.post("/v1/messages", json={**body, **extra})

    def block(text: str, ttl: str | None = None) -> dict[str, Any]:
        control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
        return {"type": "text", "text": text, "cache_control": control}

    five = post([block(f"part {i}. ") for i in range(5)])
    assert five.status_code == 400 and "maximum of 4" in five.json()["error"]["message"]
    top_level = post([block(f"part {i}. ") for i in range(4)], cache_control={"type": "ephemeral"})
    assert top_level.status_code == 400  # the automatic breakpoint takes a fifth slot
    assert post([block("a", "2h")]).status_code == 400
    late = post([block("five minutes. ", "5m"), block("one hour. ", "1h")])
    assert late.status_code == 400 and "1h" in late.json()["error"]["message"]
    ok = post([block("[cc-order] one hour first. " * 4, "1h"), block("then five minutes. " * 4, "5m")])
    assert ok.status_code == 200, ok.text
    created = ok.json()["usage"]["cache_creation"]
    assert created["ephemeral_1h_input_tokens"] > 0 and created["ephemeral_5m_input_tokens"] > 0
    automatic = post([{"type": "text", "text": "[cc-auto] automatic caching."}], cache_control={"type": "ephemeral"})
    usage = automatic.json()["usage"]
    assert automatic.status_code == 200 and usage["cache_creation_input_tokens"] > 0
    assert usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"] > 0


def test_diagnostics_are_answered_never_dropped(client: TestClient) -> None:
    sdk = _sdk(client)
    user = [{"role": "user", "content": "diagnose me"}]
    plain = sdk.messages.create(model="tiny", max_tokens=1, messages=user)
    assert plain.diagnostics is None
    asked = sdk.messages.create(
        model="tiny", max_tokens=1, messages=user, diagnostics={"previous_message_id": plain.id}
    )
    assert asked.diagnostics is None  # the same prompt: nothing missed (the reasons: test_cache_diagnostics_wire.py)
    unknown = sdk.messages.create(model="tiny", max_tokens=1, messages=user, diagnostics={"previous_message_id": "x"})
    assert (
        unknown.diagnostics is not None and unknown.diagnostics.cache_miss_reason.type == "previous_message_not_found"
    )


def test_stop_sequences_name_the_one_that_matched(client: TestClient) -> None:
    sdk = _sdk(client)
    user = [{"role": "user", "content": "Say something that we will cut short."}]
    full = sdk.messages.create(model="tiny", max_tokens=8, messages=user, extra_body=TEMPERATURE_0).content[0].text
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    cut = sdk.messages.create(
        model="tiny", max_tokens=8, messages=user, stop_sequences=["\x01never", stop], extra_body=TEMPERATURE_0
    )
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop, cut
    assert full.startswith(cut.content[0].text) and stop not in cut.content[0].text


def test_x_api_key_and_prompt_tags_in_headers(make_client) -> None:
    client = make_client(api_keys={"key-a": "tenant-a"})
    headers = {
        "x-radixgate-prompt-template": "messages-tagged",
        "x-radixgate-prompt-source": "app.py:7",
        "x-radixgate-static-prefix-chars": "4",  # without it, no static prefix is counted
    }
    sdk = anthropic.Anthropic(
        base_url=str(client.base_url), api_key="key-a", http_client=client, max_retries=0, default_headers=headers
    )
    sdk.messages.create(model="tiny", max_tokens=1, messages=[{"role": "user", "content": "tag me"}])
    stats = client.get("/v1/prompt_stats", headers={"x-api-key": "key-a"}).json()["templates"]
    row = next(t for t in stats if t["template"] == "messages-tagged")
    assert (
        row["source"] == "app.py:7" and row["requests"] == 1 and 0 < row["static_prefix_tokens"] < row["prompt_tokens"]
    )
    with pytest.raises(anthropic.AuthenticationError) as refused:
        _sdk(client, api_key="wrong").messages.create(model="tiny", max_tokens=1, messages=[])
    assert refused.value.body["error"]["type"] == "authentication_error"


def test_a_failure_after_the_stream_started_ends_with_an_error_event(client: TestClient, worker, monkeypatch) -> None:
    def broken(ids: list[int], skip_special_tokens: bool = True) -> str:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "broken bytes")

    monkeypatch.setattr(worker.engine.detokenizer, "decode", broken)
    body = {"model": "tiny", "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": "fail late"}]}
    r = client.post("/v1/messages", json=body)
    blocks = [b for b in r.text.split("\n\n") if b]
    assert blocks[0].startswith("event: message_start") and blocks[-1].startswith("event: error")
    error = json.loads(blocks[-1].split("data: ", 1)[1])
    assert error["type"] == "error" and error["error"]["type"] == "api_error", error


def test_output_config_format_is_a_grammar(client: TestClient) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 6}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    sdk = _sdk(client)
    message = sdk.messages.create(
        model="tiny",
        max_tokens=100,
        messages=[{"role": "user", "content": "Answer in JSON."}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    value = json.loads(message.content[0].text)
    assert set(value) == {"answer", "sure"} and isinstance(value["sure"], bool) and len(value["answer"]) <= 6
    assert message.stop_reason == "end_turn"


def test_sampling_fields_are_honoured(client: TestClient) -> None:
    sdk = _sdk(client)
    user = [{"role": "user", "content": "Sample a few different words for me."}]

    def text(**sampling: Any) -> str:
        return sdk.messages.create(model="tiny", max_tokens=6, messages=user, extra_body=sampling).content[0].text

    greedy = text(temperature=0)
    assert text(temperature=0) == greedy
    sampled = {text(temperature=1.0) for _ in range(4)}
    assert len(sampled) > 1  # sampling at temperature 1 over a random model's flat distribution
    assert text(temperature=1.0, top_k=1) == greedy  # top_k=1 is greedy whatever the temperature
    assert text(temperature=1.0, top_p=1e-6) == greedy  # so is a vanishing nucleus


def test_the_sdk_tagging_transport_puts_tags_in_headers(client: TestClient) -> None:
    """An httpx-based caller of /v1/messages (LiteLLM's anthropic/ provider, say) with the SDK's
    tagging transport: the tags go in headers, the body is sent as it was, the gateway reads them."""
    from radixgate._tagging import TaggingTransport

    sent: list[httpx.Request] = []
    tagged = httpx.Client(
        transport=TaggingTransport(httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200)))
    )
    body = {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "tagged by the SDK"}]}
    tagged.post("http://gateway/v1/messages", json=body)
    (request,) = sent
    assert json.loads(request.content) == body  # no metadata added: Anthropic's takes only user_id
    headers = {k: v for k, v in request.headers.items() if k.startswith("x-radixgate-") or k == "content-type"}
    assert headers["x-radixgate-prompt-template"] == "test_the_sdk_tagging_transport_puts_tags_in_headers"
    assert client.post("/v1/messages", content=request.content, headers=headers).status_code == 200
    rows = client.get("/v1/prompt_stats").json()["templates"]
    row = next(t for t in rows if t["template"] == "test_the_sdk_tagging_transport_puts_tags_in_headers")
    assert row["source"] == headers["x-radixgate-prompt-source"] and "test_messages_api.py:" in row["source"]


def test_a_last_assistant_message_is_continued(client: TestClient) -> None:
    sdk = _sdk(client)
    user = {"role": "user", "content": "Give me a JSON object."}
    prefilled = sdk.messages.create(
        model="tiny",
        max_tokens=3,
        messages=[user, {"role": "assistant", "content": '{"key":'}],
        extra_body=TEMPERATURE_0,
    )
    plain = sdk.messages.create(model="tiny", max_tokens=3, messages=[user], extra_body=TEMPERATURE_0)
    num_prefill = client.post("/tokenize", json={"prompt": '{"key":'}).json()["count"]
    # the prefill follows the generation prompt inside the answer's turn: no turn of its own
    assert 0 < _prompt_tokens(prefilled.usage) - _prompt_tokens(plain.usage) <= num_prefill + 1
