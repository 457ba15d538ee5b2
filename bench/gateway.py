"""Gateway overhead: the same streaming workload in-process (`Engine.stream`) and through
`radixgate serve` over loopback HTTP, reported as TTFT and throughput ratios.

    python -m radixgate.bench.gateway [--requests 32 --concurrency 8 --max-tokens 32]

Both sides get identical token ids, greedy decoding with `ignore_eos` (so identical output
lengths), a flushed cache and one warm-up request per run. Runs alternate between the sides
(the idle side waits without using the CPU) and medians are reported, so background load
hurts both sides alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from radixgate.gateway.observe.timeseries import percentile
from radixgate.gateway.server_process import ServerProcess

NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


@dataclass(frozen=True)
class Workload:
    requests: int
    concurrency: int
    prompt_tokens: int
    shared_tokens: int
    max_tokens: int

    def prompts(self, vocab_size: int) -> list[list[int]]:
        shared = [(7 * i + 11) % (vocab_size - 1000) + 500 for i in range(self.shared_tokens)]
        return [
            shared
            + [
                (13 * (r + 1) * (i + 1)) % (vocab_size - 1000) + 500
                for i in range(self.prompt_tokens - self.shared_tokens)
            ]
            for r in range(self.requests)
        ]


@dataclass(frozen=True)
class Result:
    ttfts: list[float]
    output_tokens: int
    wall_s: float

    def summary(self) -> dict[str, float]:
        return {
            "ttft_p50_ms": 1000 * (percentile(self.ttfts, 50) or 0.0),
            "ttft_p99_ms": 1000 * (percentile(self.ttfts, 99) or 0.0),
            "ttft_mean_ms": 1000 * statistics.fmean(self.ttfts),
            "output_tok_per_s": self.output_tokens / self.wall_s,
            "wall_s": self.wall_s,
        }


async def _drive(
    prompts: list[list[int]], concurrency: int, one: Callable[[list[int]], Awaitable[tuple[float, int]]]
) -> Result:
    gate = asyncio.Semaphore(concurrency)

    async def limited(ids: list[int]) -> tuple[float, int]:
        async with gate:
            return await one(ids)

    await one(prompts[0][:8])  # warm-up, also on the path under test
    start = time.perf_counter()
    results = await asyncio.gather(*(limited(ids) for ids in prompts))
    wall = time.perf_counter() - start
    return Result([r[0] for r in results], sum(r[1] for r in results), wall)


class InProcess:
    """The engine called directly, as `Engine.stream` callers do."""

    def __init__(self, w: Workload, engine_args: dict[str, Any]) -> None:
        from radixgate.engine import Engine, EngineConfig, SamplingParams

        self.engine = Engine(EngineConfig(**engine_args))
        self.sampling = SamplingParams(max_new_tokens=w.max_tokens, temperature=0.0, ignore_eos=True)
        self.w = w

    def run(self) -> Result:
        async def one(ids: list[int]) -> tuple[float, int]:
            start, first, count = time.perf_counter(), None, 0
            async for delta in self.engine.stream(input_ids=ids, sampling=self.sampling):
                if delta.text and first is None:  # the first visible text, as the HTTP client sees it
                    first = time.perf_counter() - start
                count += len(delta.token_ids)
            return first or 0.0, count

        self.engine.flush_cache()
        return asyncio.run(_drive(self.w.prompts(self.engine.vocab_size), self.w.concurrency, one))


class ThroughGateway:
    """The same workload as streaming `/v1/completions` requests over loopback HTTP."""

    def __init__(self, w: Workload, vocab_size: int, base_url: str) -> None:
        self.w, self.vocab_size, self.base_url = w, vocab_size, base_url

    def run(self) -> Result:
        w = self.w
        httpx.post(f"{self.base_url}/flush_cache", timeout=60).raise_for_status()

        async def drive() -> Result:
            limits = httpx.Limits(max_connections=w.concurrency + 1)
            # Nagle off on the client too, as latency-sensitive clients set it (httpx does not).
            transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=[NODELAY])
            async with httpx.AsyncClient(base_url=self.base_url, timeout=300, transport=transport) as http:

                async def one(ids: list[int]) -> tuple[float, int]:
                    body = {
                        "model": "tiny",
                        "prompt": ids,
                        "max_tokens": w.max_tokens,
                        "temperature": 0,
                        "ignore_eos": True,
                        "stream": True,
                        "stream_options": {"include_usage": True},
                    }
                    start, first, count = time.perf_counter(), None, 0
                    async with http.stream("POST", "/v1/completions", json=body) as response:
                        response.raise_for_status()
                        async for line in response.aiter_lines():
                            if not line.startswith("data: {"):
                                continue
                            event = json.loads(line[6:])
                            if event.get("choices") and event["choices"][0]["text"] and first is None:
                                first = time.perf_counter() - start
                            if event.get("usage"):
                                count = event["usage"]["completion_tokens"]
                    return first or 0.0, count

                return await _drive(w.prompts(self.vocab_size), w.concurrency, one)

        return asyncio.run(drive())


def _median(results: list[Result]) -> dict[str, float]:
    summaries = [r.summary() for r in results]
    return {key: statistics.median(s[key] for s in summaries) for key in summaries[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m radixgate.bench.gateway", description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--shared-tokens", type=int, default=384, help="prefix every prompt shares (cache hits)")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--max-total-tokens", type=int, default=65536)
    p.add_argument("--repeat", type=int, default=3, help="alternating runs per side; medians are reported")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args(argv)
    w = Workload(
        args.requests,
        args.concurrency,
        args.prompt_tokens,
        min(args.shared_tokens, args.prompt_tokens),
        args.max_tokens,
    )
    local = InProcess(w, {"max_total_tokens": args.max_total_tokens})
    local_runs, gateway_runs = [], []
    with ServerProcess(["--max-total-tokens", str(args.max_total_tokens)]) as server:
        remote = ThroughGateway(w, local.engine.vocab_size, server.base_url)
        for _ in range(args.repeat):  # alternate, so a noisy neighbour hurts both sides alike
            local_runs.append(local.run())
            gateway_runs.append(remote.run())
    local.engine.shutdown()
    a, b = _median(local_runs), _median(gateway_runs)
    ratios = {
        "ttft_p50": b["ttft_p50_ms"] / a["ttft_p50_ms"],
        "ttft_mean": b["ttft_mean_ms"] / a["ttft_mean_ms"],
        "throughput": b["output_tok_per_s"] / a["output_tok_per_s"],
    }
    if args.json:
        print(json.dumps({"workload": vars(w), "in_process": a, "gateway": b, "gateway_over_in_process": ratios}))
        return 0
    print(
        f"workload: {w.requests} streaming requests, {w.concurrency} at a time, {w.prompt_tokens} prompt tokens "
        f"({w.shared_tokens} shared), {w.max_tokens} output tokens each; median of {args.repeat} alternating runs"
    )
    print(f"{'':12}{'TTFT p50':>12}{'TTFT p99':>12}{'TTFT mean':>12}{'output tok/s':>14}")
    for name, s in (("in-process", a), ("gateway", b)):
        print(
            f"{name:12}{s['ttft_p50_ms']:>10.1f}ms{s['ttft_p99_ms']:>10.1f}ms{s['ttft_mean_ms']:>10.1f}ms"
            f"{s['output_tok_per_s']:>14.1f}"
        )
    print(
        f"gateway / in-process: TTFT p50 x{ratios['ttft_p50']:.2f}, TTFT mean x{ratios['ttft_mean']:.2f}, "
        f"throughput x{ratios['throughput']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
