"""`--disaggregation-mode` workers in-process: the same request with SGLang's bootstrap fields,
sent to a prefill and a decode app (as sglang-router's PD mode sends it), answers with the tokens a
co-located server gives; the bootstrap fields are honoured only over the worker channel, only for
a registered prefill, and refused by name everywhere else."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from in_thread_server import serve_in_thread

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.pd_worker import DisaggConfig, DisaggWorker

WORKER_KEY = "pd-worker-key"
TENANT_KEY = "pd-tenant-key"
AS_WORKER = {"Authorization": f"Bearer {WORKER_KEY}"}


@pytest.fixture(scope="module")
def pair(worker) -> Iterator[tuple[TestClient, TestClient, DisaggWorker, DisaggWorker]]:
    """A prefill worker on an engine of its own, a decode worker on the suite's shared engine."""
    from radixgate.engine import Engine, EngineConfig

    prefill = DisaggWorker(
        Engine(EngineConfig(model_path="tiny", max_total_tokens=8192)),
        DisaggConfig("prefill", bootstrap_port=0),
        WORKER_KEY.encode(),
    )
    assert prefill.prefill_side is not None
    allowed = (f"127.0.0.1:{prefill.prefill_side.bootstrap_port}",)
    decode = DisaggWorker(worker.engine, DisaggConfig("decode", prefill_bootstraps=allowed), WORKER_KEY.encode())
    config = GatewayConfig(api_keys={TENANT_KEY: "tenant-a"}, worker_api_key=WORKER_KEY)
    clients = [TestClient(create_app(config, worker=w)) for w in (prefill, decode)]
    for c in clients:
        c.__enter__()
    yield clients[0], clients[1], prefill, decode
    for c in clients:
        c.__exit__(None, None, None)
    prefill.check_idle_invariant()
    prefill.close()
    assert decode.decode_side is not None
    decode.decode_side.close()  # the shared engine serves on


def _both(pair, path: str, body: dict) -> tuple:
    p_client, d_client, prefill, _ = pair
    assert prefill.prefill_side is not None
    body = {**body, "bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.prefill_side.bootstrap_port}
    with ThreadPoolExecutor(2) as pool:
        sent = pool.submit(p_client.post, path, json=body, headers=AS_WORKER)
        answer = d_client.post(path, json=body, headers=AS_WORKER)
        return sent.result(timeout=60), answer


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions"])
def test_a_pd_pair_answers_as_a_colocated_server(pair, path):
    _, d_client, _, decode = pair
    if path == "/generate":
        body: dict = {"text": f"PD over {path}: " + "shared words " * 40, "sampling_params": {"max_new_tokens": 8}}
        body["sampling_params"]["temperature"] = 0.0
    else:
        body = {"model": "tiny", "max_tokens": 8, "temperature": 0.0}
        if path == "/v1/completions":
            body["prompt"] = f"PD over {path}: " + "shared words " * 40
        else:
            body["messages"] = [{"role": "user", "content": f"PD over {path}: " + "shared words " * 40}]
    expected = d_client.post(path, json=body, headers=AS_WORKER)  # served in full by the decode worker
    assert expected.status_code == 200, expected.text
    before = decode.decode_side.num_transfers if decode.decode_side else 0
    sent, answer = _both(pair, path, {**body, "bootstrap_room": 1000 + len(path)})
    assert sent.status_code == 200 and answer.status_code == 200, (sent.text, answer.text)
    assert decode.decode_side is not None and decode.decode_side.num_transfers == before + 1
    if path == "/generate":
        assert answer.json()["output_ids"] == expected.json()["output_ids"]
        assert len(sent.json()["output_ids"]) == 1  # the prefill worker answers with the first token
    else:
        key = "text" if path == "/v1/completions" else "message"
        assert answer.json()["choices"][0][key] == expected.json()["choices"][0][key]


def test_bootstrap_fields_need_the_worker_key_and_a_registered_prefill(pair):
    _, d_client, prefill, _ = pair
    assert prefill.prefill_side is not None
    port = prefill.prefill_side.bootstrap_port
    body = {"text": "refused", "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 7}
    as_tenant = d_client.post("/generate", json=body, headers={"Authorization": f"Bearer {TENANT_KEY}"})
    assert as_tenant.status_code == 400 and "bootstrap_host" in as_tenant.text and "worker key" in as_tenant.text
    elsewhere = d_client.post("/generate", json={**body, "bootstrap_host": "10.1.2.3"}, headers=AS_WORKER)
    assert elsewhere.status_code == 400 and "not a registered prefill" in elsewhere.text
    other_port = d_client.post("/generate", json={**body, "bootstrap_port": port + 1}, headers=AS_WORKER)
    assert other_port.status_code == 400 and "bootstrap_host" in other_port.text
    half = d_client.post("/generate", json={"text": "x", "bootstrap_room": 3}, headers=AS_WORKER)
    assert half.status_code == 400 and "bootstrap_host" in half.text
    logprobs = d_client.post("/generate", json={**body, "return_logprob": True}, headers=AS_WORKER)
    assert logprobs.status_code == 400 and "logprobs" in logprobs.text
    for field, value in [("bootstrap_pair_key", "k"), ("kv_transfer_params", {"x": 1})]:
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], field: value}
        refused = d_client.post("/v1/chat/completions", json=chat, headers=AS_WORKER)
        assert refused.status_code == 400 and field in refused.text


def test_bootstrap_fields_on_a_colocated_server_are_a_400(client):
    body = {"text": "x", "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 1}
    answer = client.post("/generate", json=body)
    assert answer.status_code == 400 and "disaggregation-mode" in answer.text


def test_a_prefill_that_never_comes_is_a_clean_error_and_releases_the_pages(pair):
    _, d_client, prefill, decode = pair
    assert decode.decode_side is not None and prefill.prefill_side is not None
    decode.decode_side.timeout_s = 1.0
    try:
        body = {"text": "lonely decode " * 20, "bootstrap_host": "127.0.0.1", "bootstrap_room": 99}
        answer = d_client.post(
            "/generate", json={**body, "bootstrap_port": prefill.prefill_side.bootstrap_port}, headers=AS_WORKER
        )
    finally:
        decode.decode_side.timeout_s = 30.0
    assert answer.status_code == 503 and "prefill" in answer.text
    decode.check_idle_invariant()


def test_the_pd_router_chooses_the_decode_worker_by_its_cache_and_its_reported_memory():
    """The router's own choice over decode members as their `/server_info` reports them: free KV
    breaks a tie of caches and queues; a held prefix wins over more free KV; a worker that cannot
    hold the request (free + evictable) loses its prefix's claim; tokens in flight count as queue."""
    from radixgate.engine.protocol import GenerateRequest, SamplingParams
    from radixgate.gateway.workers.pd_router import PDRouter
    from radixgate.gateway.workers.router import block_hashes

    urls = ["http://127.0.0.1:9", "http://127.0.0.1:10"]
    router = PDRouter(None, "tiny", [("http://127.0.0.1:11", 8998)], urls)
    a, b = sorted(router.members.values(), key=lambda m: urls.index(m.url))
    request = GenerateRequest("r", list(range(100, 740)), SamplingParams(max_new_tokens=32))

    def report(member, available: int, evictable: int = 0) -> None:  # what a health check stores
        member.is_healthy = True
        member.engine_stats = {"max_total_num_tokens": 65536, "available_tokens": available}
        member.engine_stats["evictable_tokens"] = evictable

    def chosen() -> str:
        for m in (a, b):
            m.candidate.index.clear()
        a.candidate.index.record(block_hashes(request.input_ids[:320], None), None) if holds_prefix else None
        return router.choose_decode(request).url

    holds_prefix = False
    report(a, 2000)
    report(b, 50000)
    assert chosen() == b.url  # same caches, same queues: the most free KV
    holds_prefix = True
    assert chosen() == a.url  # a holds half the prompt: it is sent half, and has room
    report(a, 100, evictable=200)
    assert chosen() == b.url  # a cannot hold the other half even by evicting
    report(a, 50000)
    assert chosen() == a.url
    a.candidate.num_tokens = 40000  # in flight there: a queue, and KV its report does not show yet
    assert chosen() == b.url


@pytest.mark.parametrize("refusal", ["handshake", "bootstrap_address"])
def test_a_decode_failing_before_it_registers_fails_the_request_at_once_and_frees_the_prefill(pair, worker, refusal):
    """Through radixgate's PD router over real HTTP: a decode worker that refuses the handshake, or
    refuses the prefill's bootstrap address (400), never registers the room. The router cancels the
    prefill request, whose worker stops waiting for the room, so the client's error comes well
    inside the room's time-out (120 s here) and both sides end idle."""
    import asyncio

    from radixgate.engine.protocol import GenerateRequest, SamplingParams
    from radixgate.gateway.workers.pd_router import PDRouter

    _, _, prefill, _ = pair
    side = prefill.prefill_side
    assert side is not None
    side.server.timeout_s = side.timeout_s = 120.0
    allowed = (f"127.0.0.1:{side.bootstrap_port}",) if refusal == "handshake" else ()
    backend = "shm" if refusal == "handshake" else "tcp"  # the prefill worker's is tcp
    decode_config = DisaggConfig("decode", backend, prefill_bootstraps=allowed)
    decode = DisaggWorker(worker.engine, decode_config, WORKER_KEY.encode())
    config = GatewayConfig(worker_api_key=WORKER_KEY)

    async def route(prefill_url: str, decode_url: str) -> BaseException:
        router = PDRouter(None, "tiny", [(prefill_url, side.bootstrap_port)], [decode_url], worker_api_key=WORKER_KEY)
        await router.start()
        try:
            request = GenerateRequest(f"early-{refusal}", list(range(200, 300)), SamplingParams(max_new_tokens=4))
            with pytest.raises(Exception) as failed:
                async for _ in router.stream(request):
                    pass
            return failed.value
        finally:
            await router.stop()
            router.close()

    try:
        with (
            serve_in_thread(create_app(config, worker=prefill), "prefill worker") as prefill_url,
            serve_in_thread(create_app(config, worker=decode), "decode worker") as decode_url,
        ):
            error = asyncio.run(asyncio.wait_for(route(prefill_url, decode_url), 30))
            for _ in range(3000):  # the prefill worker sees its request closed
                if side.num_waiting == 0:
                    break
                threading.Event().wait(0.01)
            assert side.num_waiting == 0, "the prefill worker still waits for a room nobody will register"
    finally:
        side.server.timeout_s = side.timeout_s = 30.0
        assert decode.decode_side is not None
        decode.decode_side.close()
    words = "transfer backend" if refusal == "handshake" else "not a registered prefill bootstrap address"
    assert words in str(error), error
    prefill.check_idle_invariant()
