"""A routing gateway over two HTTP workers (each a real worker app over the shared engine, reached
through ASGI) retries a request elsewhere only when its failure says nothing about the request, marks a
worker whose engine stopped unhealthy from its `/health`, and answers 503 on its own `/health` when
no worker can serve."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi.testclient import TestClient

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.pool import WorkerPool
from radixgate.gateway.workers.worker import LocalWorker

COMPLETION = {"model": "tiny", "prompt": "pool failure check", "max_tokens": 2, "temperature": 0}
Fault = Callable[[httpx.Request], Awaitable[httpx.Response]]


class Faults:
    """The next `/generate` any worker gets is answered by `next` instead (then it is cleared)."""

    def __init__(self) -> None:
        self.next: Fault | None = None
        self.hit: Switch | None = None


class Switch(httpx.AsyncBaseTransport):
    """One worker's transport to the worker app, counting `/generate` calls, open to `Faults`."""

    def __init__(self, real: httpx.AsyncBaseTransport, faults: Faults) -> None:
        self.real, self.faults = real, faults
        self.num_generates = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/generate":
            self.num_generates += 1
            fault, self.faults.next = self.faults.next, None
            if fault is not None:
                self.faults.hit = self
                return await fault(request)
        return await self.real.handle_async_request(request)


@dataclass
class Front:
    client: TestClient
    pool: WorkerPool
    switches: list[Switch]
    faults: Faults

    def healthy(self) -> list[bool]:
        return [m.is_healthy for m in self.pool.members.values()]

    def num_generates(self) -> int:
        return sum(s.num_generates for s in self.switches)


@pytest.fixture
def front(worker: LocalWorker) -> Iterator[Front]:
    worker_app = create_app(GatewayConfig(), worker=worker)
    pool = WorkerPool(worker.tokenizer, "tiny", health_check_interval_s=0.2)
    faults, switches = Faults(), []
    for name in ("a", "b"):
        member = pool.add_remote(f"http://worker-{name}.internal")
        switch = Switch(httpx.ASGITransport(app=worker_app), faults)
        member.backend._client = httpx.AsyncClient(transport=switch, base_url=member.backend.base_url)
        switches.append(switch)
    with TestClient(create_app(GatewayConfig(), worker=pool)) as client:
        yield Front(client, pool, switches, faults)


def _answer(status: int, body: dict) -> Fault:
    async def fault(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body)

    return fault


def _raise(exc: Exception) -> Fault:
    async def fault(request: httpx.Request) -> httpx.Response:
        raise exc

    return fault


def _error_event(code: str, message: str) -> Fault:
    """What a worker streams when the request fails after admission: an error event."""
    text = f"data: {json.dumps({'error': {'message': message, 'code': code}})}\n\ndata: [DONE]\n\n"

    async def fault(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})

    return fault


@pytest.mark.parametrize(
    "fault",
    [
        _raise(httpx.ConnectError("connection refused")),
        _answer(503, {"error": {"message": "the queue is full", "code": "server_overloaded"}}),
    ],
    ids=["refused", "503-before-admission"],
)
def test_a_failure_that_says_nothing_about_the_request_is_retried(front: Front, fault: Fault) -> None:
    front.faults.next = fault
    r = front.client.post("/v1/completions", json=COMPLETION)
    assert r.status_code == 200, r.text
    assert front.faults.hit is not None and front.num_generates() == 2  # the other worker served it


@pytest.mark.parametrize(
    "fault, status, code, healthy_after",
    [
        (_answer(400, {"error": {"message": "bad field", "code": "invalid_value"}}), 400, "invalid_value", True),
        (_answer(500, {"error": {"message": "internal error"}}), 503, "engine_unavailable", True),
        (_raise(httpx.ReadError("connection reset by peer")), 503, "engine_unavailable", True),
        (_error_event("request_failed", "the engine failed this request"), 500, "request_failed", True),
        (_error_event("engine_unavailable", "engine loop crashed: X"), 503, "engine_unavailable", False),
    ],
    ids=["rejected-4xx", "500", "reset-mid-request", "failed-alone", "engine-died-on-it"],
)
def test_a_request_a_worker_rejected_or_failed_is_never_retried(
    front: Front, fault: Fault, status: int, code: str, healthy_after: bool
) -> None:
    front.faults.next = fault
    r = front.client.post("/v1/completions", json=COMPLETION)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code, r.text
    assert front.faults.hit is not None and front.num_generates() == 1  # the other worker never saw it
    assert front.healthy()[front.switches.index(front.faults.hit)] is healthy_after


def test_the_seed_request_is_a_400_and_both_workers_stay_healthy(front: Front) -> None:
    r = front.client.post("/v1/completions", json={**COMPLETION, "temperature": 1.0, "seed": 2**64})
    assert r.status_code == 400 and r.json()["error"]["param"] == "seed", r.text
    assert front.num_generates() == 0 and front.healthy() == [True, True]
    assert front.client.post("/v1/completions", json={**COMPLETION, "seed": 2**64 - 1}).status_code == 200


def test_a_request_failing_inside_a_workers_engine_is_a_500_and_not_retried(front: Front, worker, monkeypatch) -> None:
    real = worker.engine.detokenizer.decode

    def decode(ids: list[int], skip_special_tokens: bool = True) -> str:
        if not skip_special_tokens:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "broken bytes")
        return real(ids, skip_special_tokens)

    monkeypatch.setattr(worker.engine.detokenizer, "decode", decode)
    sp = {"max_new_tokens": 2, "temperature": 0, "skip_special_tokens": False}
    r = front.client.post("/generate", json={"text": "pool inside failure", "sampling_params": sp})
    assert r.status_code == 500 and r.json()["error"]["code"] == "request_failed", r.text
    assert front.num_generates() == 1 and front.healthy() == [True, True]


def _until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_worker_whose_engine_stopped_is_unhealthy_and_the_front_health_is_503(
    front: Front, worker, monkeypatch
) -> None:
    """The engine's loop is gone (its fatal error set) while its HTTP server answers: `/server_info`
    still reports stats, `/health` is 503, and the router goes by `/health`."""
    assert front.client.get("/health").status_code == 200
    monkeypatch.setattr(worker.engine, "fatal_error", "engine loop crashed: ValueError: test")
    _until(lambda: front.healthy() == [False, False], "the router still calls the stopped workers healthy")
    r = front.client.get("/health")
    assert r.status_code == 503 and "engine loop crashed" in r.json()["error"]["message"], r.text
    workers = front.client.get("/workers").json()["workers"]
    assert [w["healthy"] for w in workers] == [False, False]
    assert front.client.post("/v1/completions", json=COMPLETION).status_code == 503
    monkeypatch.undo()  # the engine is back: the health checks bring both workers back
    _until(lambda: front.healthy() == [True, True], "the workers did not come back")
    assert front.client.post("/v1/completions", json=COMPLETION).status_code == 200
