"""A client that leaves a non-streaming request aborts its engine request: the disconnect reaches the
route through `DisconnectWatch` (one task awaiting `receive`), and every later `receive()` caller is
handed it too."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from radixgate.gateway.api.middleware import DisconnectWatch
from radixgate.gateway.app import app_state, create_app
from radixgate.gateway.config import GatewayConfig


def _scope(body: bytes) -> dict[str, Any]:
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    headers.append((b"content-length", str(len(body)).encode()))
    path = "/v1/chat/completions"
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http"} | {
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }  # fmt: skip


def test_a_client_leaving_a_whole_answer_aborts_it(worker) -> None:
    app = create_app(GatewayConfig(), worker=worker)
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "disconnect test: count to a thousand"}],
        "max_tokens": 4000,
        "ignore_eos": True,
    }
    sent: list[dict[str, Any]] = []

    async def run() -> None:
        calls = 0

        async def receive() -> dict[str, Any]:
            nonlocal calls
            calls += 1
            if calls == 1:
                return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
            await asyncio.sleep(0.3)  # the client leaves while the engine generates
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async with app.router.lifespan_context(app):
            await app(_scope(json.dumps(body).encode()), receive, send)

    asyncio.run(run())
    assert sent[0]["status"] == 499, sent
    aborted = app_state(app).metrics.registry.get_sample_value(
        "radixgate:requests_total", {"model_name": "tiny", "endpoint": "chat", "outcome": "aborted"}
    )
    assert aborted == 1.0


def test_the_watch_hands_the_disconnect_to_every_receiver() -> None:
    async def run() -> tuple[bool, bool, list[str]]:
        left = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await left.wait()
            return {"type": "http.disconnect"}

        watch = DisconnectWatch(receive)
        before = await watch.is_disconnected()
        listeners = [asyncio.ensure_future(watch.receive()) for _ in range(2)]
        left.set()
        messages = [m["type"] for m in await asyncio.gather(*listeners)]
        after = await watch.is_disconnected()
        watch.close()
        return before, after, messages

    before, after, messages = asyncio.run(run())
    assert (before, after, messages) == (False, True, ["http.disconnect", "http.disconnect"])
