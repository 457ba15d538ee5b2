"""Work one request can put on shared threads is bounded: prompt length before tokenizing, grammar
caps, the grammar pool's deadline, per-tenant limit and cancellation, and stop strings."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from radixgate.gateway.api.bounds import MAX_CHARS_PER_TOKEN, MAX_STOP_CHARS, MAX_STOP_STRINGS
from radixgate.gateway.app import app_state, create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.features.structured_output import MAX_CHOICES, MAX_ENUM_VALUES, MAX_SCHEMA_DEPTH

# A loop stalled by the 5 MB prompt (tokenizing it alone is 3.4 s of CPU) misses this; a healthy one,
# even on a loaded 2-core machine (a 0.6 s round seen under 15x load), does not.
DEADLINE_S = 2.0
# Under every cap, and seconds to compile against the tiny model's 100k-token vocabulary.
SLOW_REGEX = "[a-zA-Z0-9 ]{1,800}"


def _deep_schema_text(levels: int) -> str:
    """An object schema nested `levels` properties deep (2 x levels JSON levels), written as text:
    json.dumps would hit the recursion limit."""
    return '{"type":"object","properties":{"a":' * levels + '{"type":"string"}' + '},"required":["a"]}' * levels


def _chat_with_schema(schema_text: str) -> str:
    fmt = '{"type":"json_schema","json_schema":{"name":"deep","schema":' + schema_text + "}}"
    return '{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}],"response_format":' + fmt + "}"


async def _health_latencies(http: httpx.AsyncClient, until: asyncio.Task[Any]) -> list[float]:
    """How long each round of (pause, `/health`) took until `until` is done, the last round after it:
    a loop stalled by the other request shows as one long round (its probe could not even start)."""
    latencies, last = [], time.perf_counter()
    while True:
        is_last = until.done()
        await asyncio.sleep(0.02)
        assert (await http.get("/health")).status_code == 200
        now = time.perf_counter()
        latencies.append(now - last)
        last = now
        if is_last:
            return latencies


def test_a_5mb_prompt_never_stalls_health(worker: Any) -> None:
    app = create_app(GatewayConfig(), worker=worker)
    prompt = "lorem ipsum " * (5 * 1024 * 1024 // 12)

    async def run() -> tuple[httpx.Response, list[float]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
            big = asyncio.create_task(
                http.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 1}, timeout=120)
            )
            latencies = await _health_latencies(http, big)
            return await big, latencies

    response, latencies = asyncio.run(run())
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    assert "characters" in error["message"] and str(worker.context_len * MAX_CHARS_PER_TOKEN) in error["message"]
    assert latencies and max(latencies) < DEADLINE_S, latencies


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/generate", {"text": "x" * 300_000}, "text"),
        (
            "/v1/chat/completions",
            {"model": "tiny", "messages": [{"role": "user", "content": "x" * 300_000}]},
            "messages",
        ),
        ("/tokenize", {"prompt": "x" * 300_000}, "prompt"),
    ],
)
def test_every_prompt_path_refuses_by_length(client: TestClient, path: str, body: dict[str, Any], param: str) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert response.json()["error"]["code"] == "context_length_exceeded"


def test_six_deep_schemas_are_refused_and_flush_cache_stays_fast(worker: Any) -> None:
    app = create_app(GatewayConfig(), worker=worker)
    body = _chat_with_schema(_deep_schema_text(450))  # 900 JSON levels

    async def run() -> tuple[list[httpx.Response], float, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
            headers = {"content-type": "application/json"}
            deep = [
                asyncio.create_task(http.post("/v1/chat/completions", content=body, headers=headers, timeout=300))
                for _ in range(6)
            ]
            await asyncio.sleep(0.05)
            start = time.perf_counter()
            flushed = await http.post("/flush_cache", timeout=300)
            took = time.perf_counter() - start
            return list(await asyncio.gather(*deep)), took, flushed

    answers, flush_s, flushed = asyncio.run(run())
    assert flushed.status_code == 200 and flush_s < 1.0, flush_s
    for answer in answers:
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "schema_too_deep"
        assert str(MAX_SCHEMA_DEPTH) in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    "extra, param, cap",
    [
        ({"guided_choice": [f"c{i}" for i in range(MAX_CHOICES + 1)]}, "guided_choice", MAX_CHOICES),
        (
            {"guided_json": {"type": "string", "enum": [f"e{i}" for i in range(MAX_ENUM_VALUES + 1)]}},
            "guided_json",
            MAX_ENUM_VALUES,
        ),
        ({"guided_regex": "a" * 200_000}, "guided_regex", 128 * 1024),
    ],
)
def test_grammar_caps_name_the_field_and_the_cap(
    client: TestClient, extra: dict[str, Any], param: str, cap: int
) -> None:
    body = {"model": "tiny", "prompt": "caps", "max_tokens": 2, **extra}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param and str(cap) in response.json()["error"]["message"]


def test_a_slow_grammar_times_out_holds_its_tenant_slot_and_queued_compiles_cancel(
    make_client: Callable[..., TestClient], worker: Any
) -> None:
    keys = {"key-a": "a", "key-b": "b", "key-c": "c"}
    app = create_app(
        GatewayConfig(api_keys=keys, grammar_compile_timeout_s=0.3, max_grammar_compiles_per_tenant=1), worker=worker
    )
    state = app_state(app)
    tag = uuid.uuid4().hex[:8]
    compiled_before = worker.engine.grammars.num_compiled

    def body(n: int) -> dict[str, Any]:  # unique, so never in the engine's grammar cache
        return {"model": "tiny", "prompt": "slow", "max_tokens": 1, "guided_regex": f"{SLOW_REGEX}{tag}{n}"}

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:

            def post(key: str, n: int) -> Any:
                return http.post("/v1/completions", json=body(n), headers={"Authorization": f"Bearer {key}"})

            timed_out = await post("key-a", 1)
            assert timed_out.status_code == 400 and timed_out.json()["error"]["code"] == "grammar_too_complex"
            assert "0.3 s" in timed_out.json()["error"]["message"]
            # Its compile cannot be interrupted; until it ends, tenant a has no slot (b and c still do).
            busy = await post("key-a", 2)
            assert busy.status_code == 429 and busy.json()["error"]["code"] == "too_many_compiles"

            async def until(tenant: str) -> None:  # polls; the deadline only catches a hang
                deadline = time.monotonic() + 30
                while state.grammar_compiles.get(tenant) != 1:
                    assert time.monotonic() < deadline, f"tenant {tenant}'s compile never took its slot"
                    await asyncio.sleep(0.01)

            other = asyncio.create_task(post("key-b", 3))  # takes the pool's second thread
            await until("b")
            queued = asyncio.create_task(post("key-c", 4))  # both threads busy: it waits in the queue
            await until("c")
            queued.cancel()  # the client leaves
            await asyncio.gather(queued, return_exceptions=True)
            assert "c" not in state.grammar_compiles  # cancelled before it started: its slot is free at once
            assert (await other).status_code == 400
            deadline = time.monotonic() + 60
            while state.grammar_compiles and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert not state.grammar_compiles

    asyncio.run(run())
    assert worker.engine.grammars.num_compiled - compiled_before == 2  # a's and b's; c's never ran


def test_requests_sending_one_grammar_at_once_share_its_compile(worker: Any) -> None:
    # A tenant's compile limit counts grammars, not requests: a client fanning out one schema at
    # once waits for one compile on one slot (it was a 429 for all but the first two).
    app = create_app(GatewayConfig(api_keys={"key-a": "a"}, max_grammar_compiles_per_tenant=1), worker=worker)
    compiled_before = worker.engine.grammars.num_compiled
    body = {"model": "tiny", "prompt": "shared", "max_tokens": 1, "guided_regex": f"[a-z ]{{1,300}}{uuid.uuid4().hex}"}

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
            headers = {"Authorization": "Bearer key-a"}
            posts = [http.post("/v1/completions", json=body, headers=headers, timeout=120) for _ in range(6)]
            return await asyncio.gather(*posts)

    assert [r.status_code for r in asyncio.run(run())] == [200] * 6
    assert worker.engine.grammars.num_compiled - compiled_before == 1
    assert not app_state(app).grammar_compiles


def test_stop_strings_are_capped(client: TestClient) -> None:
    many = client.post(
        "/v1/completions", json={"model": "tiny", "prompt": "s", "stop": [f"s{i}" for i in range(MAX_STOP_STRINGS + 1)]}
    )
    assert many.status_code == 400 and many.json()["error"]["param"] == "stop"
    long = client.post("/generate", json={"text": "s", "sampling_params": {"stop": ["x" * (MAX_STOP_CHARS + 1)]}})
    assert long.status_code == 400 and long.json()["error"]["param"] == "sampling_params.stop"
    chat = client.post(
        "/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "s"}], "stop": ["s"] * 50_000},
    )
    assert chat.status_code == 400 and str(MAX_STOP_STRINGS) in chat.json()["error"]["message"]
    fine = client.post("/v1/completions", json={"model": "tiny", "prompt": "stop ok", "max_tokens": 2, "stop": ["."]})
    assert fine.status_code == 200


def test_a_schema_under_the_caps_still_works(client: TestClient) -> None:
    schema = json.loads(_deep_schema_text(8))
    body = {"model": "tiny", "prompt": "nested", "max_tokens": 40, "guided_json": schema}
    assert client.post("/v1/completions", json=body).status_code == 200
