"""AsyncClient against `httpx.MockTransport`, and the sync/async mirror."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys

import httpx
import pytest
from sdk_fakes import FakeServer

import radixgate as rg

BASE = "http://testserver/v1"
PROMPT = rg.Prompt(rg.system("Answer tersely. " * 30), template="async-bot")


def make_client(server: FakeServer, **options) -> rg.AsyncClient:
    options.setdefault("retry_backoff", 0.001)
    http = httpx.AsyncClient(transport=httpx.MockTransport(server.handler))
    return rg.AsyncClient(base_url=BASE, http_client=http, **options)


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in vars(cls).items() if callable(fn) and not name.startswith("_")}


def test_sync_and_async_clients_mirror_each_other():
    sync_methods, async_methods = public_methods(rg.Client), public_methods(rg.AsyncClient)
    assert sync_methods.keys() == async_methods.keys()
    for name, signature in sync_methods.items():
        other = async_methods[name]
        assert list(signature.parameters) == list(other.parameters), name
        for param in signature.parameters.values():
            twin = other.parameters[param.name]
            assert (param.kind, param.default) == (twin.kind, twin.default), f"{name}({param.name})"
            if param.name != "http_client":
                assert param.annotation == twin.annotation, f"{name}({param.name})"
        assert inspect.iscoroutinefunction(getattr(rg.AsyncClient, name)), f"AsyncClient.{name} must be async"
    init = inspect.signature(rg.Client.__init__).parameters
    assert all(p.kind is p.KEYWORD_ONLY for n, p in init.items() if n != "self")


def test_async_chat_sends_metadata_from_the_callers_line():
    server = FakeServer()

    async def main() -> tuple[rg.ChatCompletion, int]:
        async with make_client(server, model="m") as client:
            return await client.chat(PROMPT.extend(rg.user("q"))), sys._getframe().f_lineno

    reply, line = asyncio.run(main())
    meta = server.bodies()[0]["metadata"]
    assert meta["prompt_template"] == "async-bot"
    assert meta["prompt_source"].endswith(f"test_sdk_async_client.py:{line}")
    assert reply.text == "ok!"


def test_async_retries_resend_identical_bytes():
    server = FakeServer(failures=[httpx.Response(502), httpx.ConnectError("reset")])

    async def main() -> rg.Completion:
        client = make_client(server, model="m", max_retries=2)
        return await client.complete(PROMPT.extend(rg.user("q")))

    assert asyncio.run(main()).text == "ok!"
    assert len(server.requests) == 3 and len({r.content for r in server.requests}) == 1


def test_async_errors_map_like_sync():
    server = FakeServer(failures=[httpx.Response(429, json={"error": {"message": "slow down"}})] * 2)

    async def main() -> None:
        await make_client(server, model="m", max_retries=1).chat([{"role": "user", "content": "q"}])

    with pytest.raises(rg.RateLimitError, match="slow down"):
        asyncio.run(main())


def test_async_stream_and_server_endpoints():
    server = FakeServer()

    async def main() -> tuple[list[str], rg.Usage | None, rg.ServerInfo, rg.PromptStats, bool, rg.Usage | None]:
        client = make_client(server)
        warm = await client.warm(PROMPT)
        stream = await client.chat_stream(PROMPT.extend(rg.user("q")))
        texts = [chunk.text async for chunk in stream]
        completion_stream = await client.complete_stream("abc")
        async for _ in completion_stream:
            pass
        await client.flush_cache()
        return (
            texts,
            stream.usage,
            await client.server_info(),
            await client.prompt_stats(),
            await client.health(),
            warm,
        )

    texts, usage, info, stats, healthy, warm = asyncio.run(main())
    assert "".join(texts) == "ok!" and usage is not None and usage.cached_tokens > 0 and warm is not None
    assert info["cache_hit_rate"] == 0.5 and stats.templates[0].requests == 2 and healthy
    assert [r.url.path for r in server.requests][-4:] == ["/flush_cache", "/server_info", "/v1/prompt_stats", "/health"]


def test_import_stays_light():
    code = (
        "import radixgate, sys; heavy = {'torch', 'transformers', 'radixgate.engine', 'radixgate.gateway'}; "
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
