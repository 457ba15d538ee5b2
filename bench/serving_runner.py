"""Runs a `Workload` against a server and measures it; computes the hit rate the workload allows.

Ideal hit rate: the fraction of prompt tokens a perfect prefix cache (unbounded, token-granular)
could serve, sending the requests in order after the warm-up prompts: for each request, the longest
prefix it shares with any earlier request or warm-up, at most all but its last token (an engine must
compute at least one token to produce logits). Tokens are counted with cl100k through a ChatML
chat template, which is exactly what the built-in tiny model does; for other models it is a close
estimate. Shared-prefix share: the fraction of prompt tokens in a prefix shared with any other request.
"""

from __future__ import annotations

import asyncio
import bisect
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from radixgate._async_client import AsyncClient
from radixgate._exceptions import APIError
from radixgate._prompt import Prompt
from radixgate._segments import Message
from radixgate._wire import PROMPT_SOURCE, encode

from .workloads import BenchRequest, Workload

__all__ = ["RequestResult", "BenchResult", "prompt_token_ids", "prefix_reuse", "run_workload"]

_IM_START, _IM_END = -1, -2  # stand-ins for the special tokens; they never collide with cl100k ids


def _chatml(messages: Sequence[Message], generation_prompt: bool = True) -> list[int]:
    ids: list[int] = []
    for m in messages:
        ids += [_IM_START, *encode(f"{m['role']}\n{m.get('content') or ''}"), _IM_END, *encode("\n")]
    return ids + [_IM_START, *encode("assistant\n")] if generation_prompt else ids


def prompt_token_ids(request: BenchRequest) -> list[int]:
    """The token ids the server will see for `request`, under the ChatML token model."""
    if request.api == "completion":
        return encode(request.prompt.text() if isinstance(request.prompt, Prompt) else str(request.prompt))
    messages = request.prompt.messages() if isinstance(request.prompt, Prompt) else request.prompt
    return _chatml(messages)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prefix_reuse(sequences: Sequence[Sequence[int]], warm: Sequence[Sequence[int]] = ()) -> tuple[float, float]:
    """``(shared_prefix_share, ideal_hit_rate)`` of `sequences` sent in order after `warm`."""
    total = sum(len(s) for s in sequences)
    if not total:
        return 0.0, 0.0
    # The longest common prefix with a set is reached at a neighbour in sorted order.
    seen: list[tuple[int, ...]] = sorted(tuple(w) for w in warm)
    ideal = 0
    for seq in map(tuple, sequences):
        pos = bisect.bisect_left(seen, seq)
        best = max((_lcp(seq, seen[j]) for j in (pos - 1, pos) if 0 <= j < len(seen)), default=0)
        ideal += min(best, len(seq) - 1)
        seen.insert(pos, seq)
    ordered = sorted(range(len(sequences)), key=lambda i: tuple(sequences[i]))
    shared = 0
    for rank, i in enumerate(ordered):
        neighbours = [ordered[j] for j in (rank - 1, rank + 1) if 0 <= j < len(ordered)]
        shared += max((_lcp(sequences[i], sequences[j]) for j in neighbours), default=0)
    return shared / total, ideal / total


@dataclass
class RequestResult:
    """What one request measured (times in seconds)."""

    ok: bool = False
    ttft: float = 0.0
    latency: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""


@dataclass
class BenchResult:
    """The report of one run: what `radixgate bench serving` prints and writes with ``--json``."""

    workload: str
    base_url: str
    num_requests: int
    completed: int
    failed: int
    duration_s: float
    request_throughput: float
    input_throughput: float
    output_throughput: float
    ttft_mean_ms: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    prompt_tokens: int
    cached_tokens: int
    measured_hit_rate: float
    ideal_hit_rate: float
    shared_prefix_share: float
    errors: list[str] = field(default_factory=list)

    @property
    def hit_rate_vs_ideal(self) -> float:
        """measured / ideal (1.0 when the workload allows no hits and none happened)."""
        return self.measured_hit_rate / self.ideal_hit_rate if self.ideal_hit_rate else 1.0

    def to_dict(self) -> dict:
        return {**asdict(self), "hit_rate_vs_ideal": self.hit_rate_vs_ideal}


def _warm_api(workload: Workload) -> str:
    return workload.requests[0].api if workload.requests else "chat"


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


async def _send(client: AsyncClient, request: BenchRequest, max_tokens: int) -> RequestResult:
    result = RequestResult()
    start = time.perf_counter()
    source = {PROMPT_SOURCE: "radixgate bench serving"}
    try:
        if request.api == "completion":
            stream = await client.complete_stream(
                request.prompt,
                max_tokens=max_tokens,
                temperature=0.0,  # type: ignore[arg-type]
                metadata=source,
            )
        else:
            stream = await client.chat_stream(request.prompt, max_tokens=max_tokens, temperature=0.0, metadata=source)
        async for chunk in stream:
            # The first token's text, not the first event: servers send the role delta before prefill ends.
            if not result.ttft and chunk.text:
                result.ttft = time.perf_counter() - start
    except APIError as exc:
        result.error = str(exc)
        return result
    result.latency = time.perf_counter() - start
    result.ttft = result.ttft or result.latency
    if stream.usage is not None:
        usage = stream.usage
        result.prompt_tokens, result.cached_tokens = usage.prompt_tokens, usage.cached_tokens
        result.completion_tokens = usage.completion_tokens
    result.ok = True
    return result


async def run_workload(
    client: AsyncClient,
    workload: Workload,
    *,
    max_tokens: int = 8,
    max_concurrency: int | None = 4,
    request_rate: float = float("inf"),
    warm: bool = True,
    seed: int = 0,
    on_done: Callable[[], None] | None = None,
) -> BenchResult:
    """Send `workload` and measure it. Requests start at Poisson arrivals of `request_rate` per second
    (all at once when infinite), at most `max_concurrency` in flight, each after its dependency."""
    if warm:
        for prompt in workload.warm:
            if _warm_api(workload) == "completion":
                await client.complete(prompt, max_tokens=1, temperature=0.0)
            else:
                await client.warm(prompt)
    rng = random.Random(seed)
    semaphore = asyncio.Semaphore(max_concurrency or len(workload.requests) or 1)
    done = [asyncio.Event() for _ in workload.requests]
    results: list[RequestResult] = [RequestResult() for _ in workload.requests]
    offsets, t = [], 0.0
    for _ in workload.requests:
        offsets.append(t)
        t += rng.expovariate(request_rate) if request_rate != float("inf") else 0.0

    async def one(i: int, request: BenchRequest, start_at: float) -> None:
        try:
            await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
            if request.depends_on is not None:
                await done[request.depends_on].wait()
            async with semaphore:
                results[i] = await _send(client, request, max_tokens)
        finally:
            done[i].set()
            if on_done:
                on_done()

    begin = time.perf_counter()
    await asyncio.gather(*(one(i, r, begin + offsets[i]) for i, r in enumerate(workload.requests)))
    duration = time.perf_counter() - begin
    return summarize(workload, results, duration, client.options.base_url)


def summarize(workload: Workload, results: Sequence[RequestResult], duration: float, base_url: str) -> BenchResult:
    """A `BenchResult` from per-request results; hit rates count completed requests only."""
    ok = [r for r in results if r.ok]
    share, ideal = prefix_reuse(
        [prompt_token_ids(r) for r in workload.requests],
        [prompt_token_ids(BenchRequest(p, api=_warm_api(workload))) for p in workload.warm],
    )
    ttfts, latencies = [r.ttft * 1000 for r in ok], [r.latency * 1000 for r in ok]
    prompt_tokens, cached = sum(r.prompt_tokens for r in ok), sum(r.cached_tokens for r in ok)
    duration = max(duration, 1e-9)
    return BenchResult(
        workload=workload.name,
        base_url=base_url,
        num_requests=len(results),
        completed=len(ok),
        failed=len(results) - len(ok),
        duration_s=duration,
        request_throughput=len(ok) / duration,
        input_throughput=prompt_tokens / duration,
        output_throughput=sum(r.completion_tokens for r in ok) / duration,
        ttft_mean_ms=statistics.fmean(ttfts) if ttfts else 0.0,
        ttft_p50_ms=_percentile(ttfts, 50),
        ttft_p99_ms=_percentile(ttfts, 99),
        latency_p50_ms=_percentile(latencies, 50),
        latency_p99_ms=_percentile(latencies, 99),
        prompt_tokens=prompt_tokens,
        cached_tokens=cached,
        measured_hit_rate=cached / prompt_tokens if prompt_tokens else 0.0,
        ideal_hit_rate=ideal,
        shared_prefix_share=share,
        errors=sorted({r.error for r in results if r.error})[:5],
    )
