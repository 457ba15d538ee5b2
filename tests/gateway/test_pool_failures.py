"""A routing gateway over two HTTP workers (each a real worker app over the shared engine, served on
127.0.0.1 and a free port) retries a request elsewhere only when its failure says nothing about the
request, marks a worker whose engine stopped unhealthy from its `/health`, and answers 503 on its
own `/health` when no worker can serve."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from in_thread_server import serve_in_thread

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.pool import WorkerPool
from radixgate.gateway.workers.worker import LocalWorker
from radixgate.gateway.workers.worker_http import WorkerConnections, WorkerResponse

COMPLETION = {"model": "tiny", "prompt": "pool failure check", "max_tokens": 2, "temperature": 0}
# A worker's answer in place of its app's (ASGI), or what the front's client raises instead of sending
Fault = Callable[[dict[str, Any], Any, Any], Awaitable[None]] | Exception


class Faults:
    """The next `/generate` any worker gets is answered by `next` instead (then it is cleared)."""

    def __init__(self) -> None:
        self.next: Fault | None = None
        self.hit: Switch | None = None

    def take(self, switch: Switch, raised: bool) -> Fault | None:
        fault = self.next
        if fault is None or isinstance(fault, Exception) is not raised:
            return None
        self.next, self.hit = None, switch
        return fault


class Switch:
    """One worker's app (ASGI) counting `/generate` calls, open to `Faults` that answer for it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.faults = Faults()  # shared by both workers, fresh for each test
        self.num_generates = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/generate":
            self.num_generates += 1
            fault = self.faults.take(self, raised=False)
            if fault is not None and not isinstance(fault, Exception):
                return await fault(scope, receive, send)
        await self.app(scope, receive, send)


class Connections(WorkerConnections):
    """A member's real connections to its worker; a fault that is an exception is raised here, as
    the client raises it when a connection is refused or resets (the worker never sees it)."""

    def __init__(self, url: str, switch: Switch) -> None:
        super().__init__(url)
        self.switch = switch

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> WorkerResponse:
        fault = self.switch.faults.take(self.switch, raised=True) if path == "/generate" else None
        if isinstance(fault, Exception):
            self.switch.num_generates += 1
            raise fault
        return await super().post(path, body, headers)


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


@pytest.fixture(scope="module")
def served(worker: LocalWorker) -> Iterator[list[tuple[str, Switch]]]:
    """Two worker apps over the shared engine, each on its own port."""
    switches = [Switch(create_app(GatewayConfig(), worker=worker)) for _ in range(2)]
    with serve_in_thread(switches[0], "worker a") as url_a, serve_in_thread(switches[1], "worker b") as url_b:
        yield [(url_a, switches[0]), (url_b, switches[1])]


@pytest.fixture
def front(worker: LocalWorker, served: list[tuple[str, Switch]]) -> Iterator[Front]:
    pool = WorkerPool(worker.tokenizer, "tiny", health_check_interval_s=0.2)
    faults, switches = Faults(), []
    for url, switch in served:
        switch.faults, switch.num_generates = faults, 0
        member = pool.add_remote(url)
        member.backend._connections = Connections(url, switch)
        switches.append(switch)
    with TestClient(create_app(GatewayConfig(), worker=pool)) as client:
        yield Front(client, pool, switches, faults)


def _send(status: int, content_type: bytes, body: bytes) -> Fault:
    async def fault(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return fault


def _answer(status: int, body: dict) -> Fault:
    return _send(status, b"application/json", json.dumps(body).encode())


def _error_event(code: str, message: str) -> Fault:
    """What a worker streams when the request fails after admission: an error event."""
    text = f"data: {json.dumps({'error': {'message': message, 'code': code}})}\n\ndata: [DONE]\n\n"
    return _send(200, b"text/event-stream", text.encode())


@pytest.mark.parametrize(
    "fault",
    [
        httpx.ConnectError("connection refused"),
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
        (httpx.ReadError("connection reset by peer"), 503, "engine_unavailable", True),
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
