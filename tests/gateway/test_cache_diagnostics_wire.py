"""The diagnostics in the other APIs' shapes, through their official clients in-process: Anthropic's
`diagnostics.cache_miss_reason` on `/v1/messages` (with a 10-turn session at temperature 1 keeping the
cache through every reply) and OpenAI's `prompt_cache_diagnostics` on `/v1/responses`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import anthropic
import openai
from fastapi.testclient import TestClient

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.worker import LocalWorker


def claude(client: TestClient) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=str(client.base_url), api_key="unused", http_client=client, max_retries=0)


def system(tag: str) -> str:
    return " ".join(f"[{tag}] Rule {i} of the assistant stays fixed." for i in range(20))


def test_messages_reasons_in_anthropics_shape(client: TestClient) -> None:
    sdk, text = claude(client), system(uuid.uuid4().hex[:8])
    user: list[Any] = [{"role": "user", "content": "hello there"}]
    first = sdk.messages.create(
        model="tiny", max_tokens=2, system=text, messages=user, diagnostics={"previous_message_id": None}
    )
    assert first.diagnostics is None  # nothing to compare with yet (cold): as Anthropic answers a first turn
    same = sdk.messages.create(
        model="tiny", max_tokens=2, system=text, messages=user, diagnostics={"previous_message_id": first.id}
    )
    assert same.diagnostics is None
    changed = sdk.messages.create(
        model="tiny",
        max_tokens=2,
        system=text.replace("Rule 10", "RULE 10"),
        messages=user,
        diagnostics={"previous_message_id": first.id},
    )
    reason = changed.diagnostics.cache_miss_reason  # type: ignore[union-attr]
    assert reason.type == "system_changed"
    assert reason.cache_missed_input_tokens == changed.usage.input_tokens + (
        changed.usage.cache_creation_input_tokens or 0
    )
    assert (reason.model_extra or {})["message_index"] is None  # the system prompt is no message of Anthropic's
    later = [*user, {"role": "assistant", "content": "General Kenobi."}, {"role": "user", "content": "and you?"}]
    edited = [{"role": "user", "content": "hello here"}, *later[1:]]
    one = sdk.messages.create(model="tiny", max_tokens=2, system=text, messages=later)
    two = sdk.messages.create(
        model="tiny", max_tokens=2, system=text, messages=edited, diagnostics={"previous_message_id": one.id}
    )
    reason = two.diagnostics.cache_miss_reason  # type: ignore[union-attr]
    assert reason.type == "messages_changed" and (reason.model_extra or {})["message_index"] == 0
    other = sdk.messages.create(
        model="tiny", max_tokens=1, system=text, messages=user, diagnostics={"previous_message_id": "msg_x"}
    )
    assert other.diagnostics.cache_miss_reason.type == "previous_message_not_found"  # type: ignore[union-attr]


class UpperCaseReplies:
    """The real worker behind a template that rewrites assistant text: replies are re-rendered."""

    def __init__(self, inner: LocalWorker) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def render_chat(self, messages: Sequence[dict[str, Any]], tools: Any = None) -> str:
        upper = [dict(m, content=m["content"].upper()) if m["role"] == "assistant" else m for m in messages]
        return self.inner.render_chat(upper, tools)


def test_radixgate_reasons_are_unavailable_with_extension_fields(paged_worker: LocalWorker) -> None:
    app = create_app(GatewayConfig(), worker=UpperCaseReplies(paged_worker))  # type: ignore[arg-type]
    with TestClient(app) as client:
        sdk, text = claude(client), system(uuid.uuid4().hex[:8])
        user: list[Any] = [{"role": "user", "content": "tell me a story"}]
        first = sdk.messages.create(model="tiny", max_tokens=40, system=text, messages=user)
        reply = first.content[0].text  # type: ignore[union-attr]
        follow = [*user, {"role": "assistant", "content": reply}, {"role": "user", "content": "go on"}]
        second = sdk.messages.create(
            model="tiny", max_tokens=1, system=text, messages=follow, diagnostics={"previous_message_id": first.id}
        )
    reason = second.diagnostics.cache_miss_reason  # type: ignore[union-attr]
    assert reason.type == "unavailable"
    extra = reason.model_extra or {}
    assert extra["radixgate_reason"] == "history_rerendered" and extra["message_index"] == 1
    assert extra["diverged_at_token"] >= second.usage.cache_read_input_tokens
    paged_worker.check_idle_invariant()


def test_a_ten_turn_messages_session_keeps_the_cache(client: TestClient) -> None:
    sdk, text = claude(client), system(uuid.uuid4().hex[:8])
    messages: list[Any] = []
    previous = None
    for turn in range(10):
        messages.append({"role": "user", "content": f"Turn {turn}: go on with the story."})
        answer = sdk.messages.create(
            model="tiny", max_tokens=6, system=text, messages=messages, extra_body={"temperature": 1.0}
        )
        u = answer.usage
        prompt = u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
        if previous is not None:
            assert (u.cache_read_input_tokens or 0) / previous >= 0.9, (turn, u, previous)
        previous = prompt + u.output_tokens
        messages.append({"role": "assistant", "content": answer.content[0].text})  # type: ignore[union-attr]


def test_responses_prompt_cache_diagnostics(client: TestClient) -> None:
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    text = system(uuid.uuid4().hex[:8])

    def ask(instructions: str, comparison: str) -> dict[str, Any]:
        made = sdk.responses.create(
            model="tiny",
            instructions=instructions,
            input="hello there",
            max_output_tokens=1,
            extra_body={"prompt_cache_options": {"comparison_response_id": comparison}},
        )
        return (made.model_extra or {})["prompt_cache_diagnostics"]

    first = sdk.responses.create(model="tiny", instructions=text, input="hello there", max_output_tokens=2)
    hit = ask(text, first.id)
    assert hit["type"] == "cache_hit"
    miss = ask(text.replace("Rule 10", "RULE 10"), first.id)
    assert miss["type"] == "cache_miss" and miss["reason"] == "system_changed"
    assert 0 < miss["comparison_reusable_tokens"] == miss["diverged_at_token"] and miss["cache_missed_tokens"] > 0
    assert ask(text, "resp_never_issued") == {"type": "comparison_response_not_found"}


def test_streamed_messages_carry_diagnostics_on_message_delta(client: TestClient) -> None:
    text = system(uuid.uuid4().hex[:8])
    first = claude(client).messages.create(
        model="tiny", max_tokens=2, system=text, messages=[{"role": "user", "content": "hello there"}]
    )
    body = {
        "model": "tiny",
        "max_tokens": 2,
        "stream": True,
        "system": text.replace("Rule 12", "RULE 12"),
        "messages": [{"role": "user", "content": "hello there"}],
        "diagnostics": {"previous_message_id": first.id},
    }
    with client.stream("POST", "/v1/messages", json=body) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    start = next(e for e in events if e["type"] == "message_start")
    assert "diagnostics" not in start["message"]  # known only once the prompt has been matched
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["diagnostics"]["cache_miss_reason"]["type"] == "system_changed"


def test_a_stored_response_compares_after_the_diagnostics_store_dropped_it(make_client: Any) -> None:
    client = make_client(diagnostics_history_size=1)
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    text = system(uuid.uuid4().hex[:8])
    first = sdk.responses.create(model="tiny", instructions=text, input="hello there", max_output_tokens=2)
    sdk.responses.create(model="tiny", input="something else entirely", max_output_tokens=1)  # pushes `first` out
    changed = sdk.responses.create(
        model="tiny",
        instructions=text.replace("Rule 10", "RULE 10"),
        input="hello there",
        max_output_tokens=1,
        extra_body={"prompt_cache_options": {"comparison_response_id": first.id}},
    )
    answer = (changed.model_extra or {})["prompt_cache_diagnostics"]
    assert answer["type"] == "cache_miss" and answer["reason"] == "system_changed"
