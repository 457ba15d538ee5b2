"""The gateway's checks against live servers: `radixgate bench gateway-figures`.

Starts two servers on free loopback ports (one open, one with two API keys), drives them with
the official `openai` package and plain HTTP, and prints one line per item.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time

import httpx
import openai
import requests

from radixgate.gateway.server_process import ServerProcess

SYSTEM = " ".join(f"Rule {i}: answer the customer politely and cite the refund policy." for i in range(80))


def item1(base: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    cached = []
    for question in ("Where is my order?", "Can I get a refund?"):
        reply = client.chat.completions.create(
            model="tiny",
            max_tokens=4,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        )
        cached.append((reply.usage.prompt_tokens, reply.usage.prompt_tokens_details.cached_tokens))
    stream = client.chat.completions.create(
        model="tiny",
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "And streamed?"}],
    )
    last = list(stream)[-1]
    texts = [client.completions.create(model="tiny", prompt=SYSTEM + f" Q{i}", max_tokens=2) for i in range(2)]
    print(
        f"1. openai chat: (prompt, cached) first {cached[0]}, second {cached[1]}; streamed chat "
        f"cached_tokens={last.usage.prompt_tokens_details.cached_tokens}; completions cached "
        f"{[t.usage.prompt_tokens_details.cached_tokens for t in texts]}"
    )


def item2(base: str) -> None:
    lines = subprocess.run(f"curl -s {base}/metrics | grep cache", shell=True, capture_output=True, text=True).stdout
    names = sorted({line.split("{")[0].split(" ")[0] for line in lines.splitlines() if not line.startswith("#")})
    rate = requests.get(f"{base}/get_server_info").json()["cache_hit_rate"]
    print(
        f"2. curl /metrics | grep cache -> {len(names)} metrics ({', '.join(names[:4])}, ...); "
        f"get_server_info cache_hit_rate={rate:.3f}"
    )


def item3(base: str) -> None:
    def cached(key: str) -> int:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
        return client.completions.create(
            model="tiny", prompt=SYSTEM, max_tokens=1, extra_body={"cache_salt": "guess"}
        ).usage.prompt_tokens_details.cached_tokens

    print(f"3. tenants: A first={cached('key-a')}, A again={cached('key-a')}, B same prompt={cached('key-b')}")


def item4(base: str) -> None:
    checks = {
        "too long": {"model": "tiny", "prompt": "word " * 9000},
        "negative max_tokens": {"model": "tiny", "prompt": "x", "max_tokens": -1},
        "unknown model": {"model": "gpt-4o", "prompt": "x"},
    }
    out = [f"{name} {requests.post(f'{base}/v1/completions', json=body).status_code}" for name, body in checks.items()]
    bad = requests.post(f"{base}/v1/completions", data=b"{oops", headers={"content-type": "application/json"})
    print(
        f"4. bad input: {', '.join(out)}, malformed JSON {bad.status_code} "
        f"(schemathesis: pytest tests/gateway/test_schemathesis.py)"
    )


async def _stream(http: httpx.AsyncClient, i: int) -> str:
    leave = i % 4 == 0
    body = {
        "model": "tiny",
        "stream": True,
        "max_tokens": 400 if leave else 12,
        "ignore_eos": leave,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"client {i}"}],
    }
    chunks = 0
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line == "data: [DONE]":
                return "done"
            chunks += line.startswith("data: ")
            if leave and chunks == 4:
                return "left"
    return "cut"


def item5(base: str) -> None:
    async def load() -> list[str]:
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=httpx.Limits(max_connections=64)) as http:
            return await asyncio.gather(*(_stream(http, i) for i in range(64)))

    start = time.monotonic()
    outcomes = asyncio.run(asyncio.wait_for(load(), 120))
    elapsed = time.monotonic() - start
    while requests.get(f"{base}/server_info").json()["num_running_reqs"]:
        time.sleep(0.1)
    check = requests.get(f"{base}/debug/check_idle_invariant").json()["ok"]
    print(
        f"5. load: 64 streams in {elapsed:.1f} s: {outcomes.count('done')} done, {outcomes.count('left')} "
        f"disconnected, other {len(outcomes) - outcomes.count('done') - outcomes.count('left')}; "
        f"idle invariant ok={check}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixgate bench gateway-figures", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    with ServerProcess(["--enable-debug-endpoints"]) as server:
        for item in (item1, item2, item4, item5):
            item(server.base_url)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as keys:
        json.dump({"key-a": "tenant-a", "key-b": "tenant-b"}, keys)
        keys.flush()
        with ServerProcess(["--api-keys-file", keys.name]) as server:
            item3(server.base_url)
    print("6. dashboard: radixgate bench screenshot docs/dashboard.png")
    print("7. overhead:  radixgate bench gateway")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
