"""The `/v1/responses` store and `previous_response_id`: a multi-turn agent session served from the
cache (each continuation reuses the previous prompt and output token ids), the continuation's
prompt equal token for token to the stored ids plus the new items, tenants that cannot see, delete
or continue from each other's responses, the store's bounds (entries, bytes, oldest dropped
first) and expiry (injected clock), `store: false`, and both APIs through a routing front."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from radixgate.bench.agent_session import WEATHER_TOOL, run_session, table
from radixgate.gateway.app import app_state
from radixgate.gateway.tenancy.response_store import ResponseStore, StoredResponse


def _sdk(client: TestClient, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{client.base_url}/v1", api_key=api_key, http_client=client, max_retries=0)


def test_an_agent_session_reuses_the_cache(client: TestClient) -> None:
    rows = run_session(_sdk(client), turns=10, tag="store-test")
    assert rows[0].previous_total == 0 and rows[0].input_tokens > 0
    for row in rows[1:]:
        assert row.cached_tokens >= 0.95 * row.previous_total, table(rows)
        assert row.input_tokens > row.previous_total  # the whole previous prompt and output, then the new items


def test_a_continuation_is_the_stored_ids_then_the_new_items(client: TestClient) -> None:
    sdk = _sdk(client)
    first = sdk.responses.create(model="tiny", input="[ids] Begin the story.", max_output_tokens=6, temperature=0)
    second = sdk.responses.create(
        model="tiny", input="[ids] Go on.", previous_response_id=first.id, max_output_tokens=2, temperature=0
    )
    store = client.app.state.responses
    stored_first, stored_second = store.get("default", first.id), store.get("default", second.id)
    prefix = stored_first.prompt_ids + stored_first.output_ids
    assert stored_second.prompt_ids[: len(prefix)] == prefix  # reused, not re-rendered
    worker = app_state(client.app).worker
    tail = worker.detokenize(stored_second.prompt_ids[len(prefix) :])
    assert tail.endswith("<|im_start|>user\n[ids] Go on.<|im_end|>\n<|im_start|>assistant\n"), tail
    assert second.usage.input_tokens_details.cached_tokens >= len(prefix) - 1
    changed = sdk.responses.create(
        model="tiny", input="[ids] Go on.", previous_response_id=first.id, instructions="Be brief.", max_output_tokens=1
    )  # new instructions: the conversation is rendered anew, with them first
    text = worker.detokenize(client.app.state.responses.get("default", changed.id).prompt_ids)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>") and "[ids] Begin the story." in text


def test_tenants_cannot_reach_each_others_responses(make_client) -> None:
    client = make_client(api_keys={"key-a": "tenant-a", "key-b": "tenant-b"})
    a, b = _sdk(client, "key-a"), _sdk(client, "key-b")
    mine = a.responses.create(model="tiny", input="[tenants] private", max_output_tokens=1)
    assert a.responses.retrieve(mine.id).id == mine.id
    for response_id in (mine.id, "resp_never_made"):  # another tenant's id answers as an unknown one
        with pytest.raises(openai.NotFoundError) as seen:
            b.responses.retrieve(response_id)
        assert response_id in seen.value.body["message"]
        with pytest.raises(openai.NotFoundError):
            b.responses.delete(response_id)
        with pytest.raises(openai.BadRequestError) as continued:
            b.responses.create(model="tiny", input="go on", previous_response_id=response_id, max_output_tokens=1)
        assert continued.value.body["code"] == "previous_response_not_found"
    assert a.responses.retrieve(mine.id).id == mine.id  # b's attempts left it alone


def test_the_store_drops_its_oldest_beyond_its_size(make_client) -> None:
    client = make_client(response_store_size=2)
    sdk = _sdk(client)
    made = [sdk.responses.create(model="tiny", input=f"[size] {i}", max_output_tokens=1).id for i in range(3)]
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(made[0])
    assert [sdk.responses.retrieve(i).id for i in made[1:]] == made[1:]
    with pytest.raises(openai.BadRequestError):
        sdk.responses.create(model="tiny", input="x", previous_response_id=made[0], max_output_tokens=1)


def test_store_false_keeps_nothing(client: TestClient) -> None:
    sdk = _sdk(client)
    unkept = sdk.responses.create(model="tiny", input="[store] forget me", max_output_tokens=1, store=False)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(unkept.id)
    with pytest.raises(openai.BadRequestError):
        sdk.responses.create(model="tiny", input="x", previous_response_id=unkept.id, max_output_tokens=1)


def _entry(num_tokens: int) -> StoredResponse:
    return StoredResponse.of({"id": "r"}, [1] * num_tokens, [2], messages=[], tools=None, instructions=None)


def test_store_bounds_by_entries_and_bytes_per_tenant() -> None:
    size = _entry(100).num_bytes
    store = ResponseStore(max_entries=3, max_bytes=int(2.5 * size), ttl_s=60)
    for i in range(3):
        assert store.put("a", f"r{i}", _entry(100))
    assert store.get("a", "r0") is None and store.num_entries("a") == 2  # bytes: two fit
    assert store.num_bytes("a") == 2 * size
    assert store.put("b", "r0", _entry(100)) and store.get("a", "r1") is not None  # b has bounds of its own
    assert store.get("b", "r1") is None  # and sees only its own ids
    assert not store.put("a", "huge", _entry(10_000))  # larger than the whole bound: not kept
    small = ResponseStore(max_entries=2, max_bytes=10**9, ttl_s=60)
    for i in range(3):
        small.put("a", f"s{i}", _entry(1))
    assert [small.get("a", f"s{i}") is not None for i in range(3)] == [False, True, True]
    assert small.delete("a", "s1") and not small.delete("a", "s1") and small.num_entries("a") == 1


def test_store_entries_expire() -> None:
    now = [1000.0]
    store = ResponseStore(max_entries=10, max_bytes=10**9, ttl_s=30, clock=lambda: now[0])
    store.put("a", "old", _entry(1))
    now[0] += 20
    store.put("a", "new", _entry(1))
    now[0] += 15  # old is 35 s old, new 15 s
    assert store.get("a", "old") is None and store.get("a", "new") is not None
    now[0] += 15
    assert store.get("a", "new") is None and store.num_entries("a") == 0 and store.num_bytes("a") == 0


def test_stored_bytes_count_what_is_kept(client: TestClient) -> None:
    sdk = _sdk(client)
    made: Any = sdk.responses.create(model="tiny", input="[bytes] " + "long text " * 50, max_output_tokens=2)
    entry = client.app.state.responses.get("default", made.id)
    assert entry.num_bytes > 4 * (len(entry.prompt_ids) + len(entry.output_ids)) + len("long text ") * 50


def test_a_routing_front_serves_both_apis(worker) -> None:
    """Through a pool over a remote radixgate worker (its app on a loopback port): continuations keep their
    cache hits, and a forced Messages tool call comes back as on the co-located engine."""
    import anthropic
    from in_thread_server import serve_in_thread

    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig
    from radixgate.gateway.workers.pool import WorkerPool

    pool = WorkerPool(worker.tokenizer, "tiny", health_check_interval_s=0.2)
    worker_app = create_app(GatewayConfig(), worker=worker)
    with serve_in_thread(worker_app, "worker") as url:
        pool.add_remote(url)  # checked healthy as the front starts
        with TestClient(create_app(GatewayConfig(), worker=pool)) as front:
            sdk = _sdk(front)
            first = sdk.responses.create(
                model="tiny", input="[front] Tell a story.", max_output_tokens=8, temperature=0
            )
            second = sdk.responses.create(
                model="tiny", input="[front] Go on.", previous_response_id=first.id, max_output_tokens=1, temperature=0
            )
            previous = first.usage.input_tokens + first.usage.output_tokens
            assert second.usage.input_tokens_details.cached_tokens >= 0.95 * previous
            claude = anthropic.Anthropic(
                base_url=str(front.base_url), api_key="unused", http_client=front, max_retries=0
            )
            weather = {"name": "get_weather", "input_schema": WEATHER_TOOL["parameters"]}  # bounded: the call ends
            call = claude.messages.create(
                model="tiny",
                max_tokens=100,
                tools=[weather],
                tool_choice={"type": "tool", "name": "get_weather"},
                messages=[{"role": "user", "content": "[front] Weather in Kyiv?"}],
                extra_body={"temperature": 0},
            )
            assert call.stop_reason == "tool_use" and call.content[0].type == "tool_use", call
