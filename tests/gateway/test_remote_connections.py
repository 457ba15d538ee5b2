"""A remote radixgate worker is reached over kept-alive connections: a front that opened a new TCP
connection for every request (a streamed body left unread is closed, not pooled) paid a connect and
an accept per request on both sides.

The worker is the shared engine's app served by uvicorn in a thread on 127.0.0.1 and a free port;
the client port of each `/generate` it serves names the connection it came on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from in_thread_server import serve_in_thread

from radixgate.engine.protocol import GenerateRequest, SamplingParams, block_hashes
from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.kv_index import _request_hashes
from radixgate.gateway.workers.remote import RadixgateWorker
from radixgate.gateway.workers.worker import LocalWorker
from radixgate.gateway.workers.worker_http import KEEPALIVE_EXPIRY_S


@pytest.fixture(scope="module")
def served(worker: LocalWorker) -> Iterator[tuple[str, list[int]]]:
    """(URL, the client port of every `/generate` the worker served)."""
    app = create_app(GatewayConfig(), worker=worker)
    ports: list[int] = []

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/generate":
            ports.append(scope["client"][1])
        await app(scope, receive, send)

    with serve_in_thread(recording, "worker") as url:
        yield url, ports


def test_requests_to_a_remote_worker_share_one_connection(worker: LocalWorker, served: tuple[str, list[int]]) -> None:
    url, ports = served
    remote = RadixgateWorker(url)
    prompt = worker.tokenize("Kept-alive connections to a remote worker, said three times over")
    sampling = SamplingParams(max_new_tokens=3, temperature=0.0)

    async def three() -> list[list[int]]:
        outputs = []
        try:
            for i in range(3):
                async for delta in remote.stream(GenerateRequest(f"keepalive-{i}", prompt, sampling)):
                    if delta.finished:
                        assert delta.output is not None
                        outputs.append(delta.output.token_ids)
        finally:
            await remote.aclose()
        return outputs

    before = len(ports)
    outputs = asyncio.run(asyncio.wait_for(three(), 60))
    assert len(outputs) == 3 and outputs[0] == outputs[1] == outputs[2] and len(outputs[0]) == 3
    served_now = ports[before:]
    assert len(served_now) == 3 and len(set(served_now)) == 1, served_now


def test_an_idle_connection_is_dropped_before_the_worker_drops_it() -> None:
    """A request sent on a connection as the worker closes it fails as taken (a ReadError, never
    retried): the front lets an idle connection go well before `radixgate serve`'s uvicorn does."""
    served_with = uvicorn.Config(create_app)  # `radixgate serve` keeps uvicorn's keep-alive timeout
    assert KEEPALIVE_EXPIRY_S <= served_with.timeout_keep_alive / 2


def test_one_request_chain_is_shared_by_the_workers_but_never_stale() -> None:
    """The KV-event chain is hashed once per request for every worker's index; a request that differs
    in its ids, salt, block size or seed gets its own chain."""
    ids = list(range(64))
    cases = [(ids, None, 16, "0"), (ids, "tenant-a", 16, "0"), (ids, None, 32, "0"), (ids, None, 16, "1")]
    cases += [(ids[:48] + [7] * 16, None, 16, "0"), (ids, None, 16, "0")]
    for token_ids, salt, block_size, seed in cases:
        first = _request_hashes(token_ids, salt, block_size, seed)
        assert first == block_hashes(token_ids, salt, block_size, seed)
        assert _request_hashes(list(token_ids), salt, block_size, seed) is first  # the second worker's ask
