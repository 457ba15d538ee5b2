"""Per-second history for the dashboard: hit rate, token usage, TTFT percentiles, throughput,
for the whole server and for each tenant (its own requests; the levels stay the server's).

Finished requests are added to the bucket of the second they finished in; token usage is
sampled whenever the history is read or a request finishes. Only `window_s` seconds are kept.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PERCENTILE_WINDOW_S = 10
MAX_TTFTS_PER_SECOND = 512


@dataclass
class _Second:
    second: int
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    embedding_tokens: int = 0  # embedded prompts' tokens: never cache queries, so apart from prompt_tokens
    ttfts: list[float] = field(default_factory=list)
    token_usage: float = 0.0
    cache_hit_rate: float | None = None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, `q` in [0, 100]; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


class TimeSeries:
    """The server's seconds (every request, and the sampled levels) and each tenant's own (its
    requests only), kept for `window_s` seconds."""

    def __init__(self, window_s: int = 300, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self._clock = clock
        self._seconds: deque[_Second] = deque()
        self._by_tenant: dict[str, deque[_Second]] = {}
        self._lock = threading.Lock()

    def _bucket(self, now: float, seconds: deque[_Second] | None = None) -> _Second:
        seconds = self._seconds if seconds is None else seconds
        second = int(now)
        if not seconds or seconds[-1].second != second:
            seconds.append(_Second(second))
        while seconds and seconds[0].second <= second - self.window_s:
            seconds.popleft()
        return seconds[-1]

    def sample(self, stats: dict[str, Any]) -> None:
        with self._lock:
            bucket = self._bucket(self._clock())
            bucket.token_usage = max(bucket.token_usage, float(stats.get("token_usage", 0.0)))
            bucket.cache_hit_rate = float(stats.get("cache_hit_rate", 0.0))

    def _buckets(self, tenant: str | None) -> list[_Second]:
        now = self._clock()
        buckets = [self._bucket(now)]
        if tenant is not None:
            buckets.append(self._bucket(now, self._by_tenant.setdefault(tenant, deque())))
        return buckets

    def record_embeddings(self, num_tokens: int, tenant: str | None = None) -> None:
        """A finished `/v1/embeddings` request: counted, its tokens apart from the hit rate's."""
        with self._lock:
            for bucket in self._buckets(tenant):
                bucket.requests += 1
                bucket.embedding_tokens += num_tokens

    def record(
        self,
        prompt_tokens: int,
        cached_tokens: int,
        completion_tokens: int,
        ttft: float | None,
        tenant: str | None = None,
    ) -> None:
        """A finished generation, in the server's second and, with `tenant`, in that tenant's."""
        with self._lock:
            for bucket in self._buckets(tenant):
                bucket.requests += 1
                bucket.prompt_tokens += prompt_tokens
                bucket.cached_tokens += cached_tokens
                bucket.completion_tokens += completion_tokens
                if ttft is not None and len(bucket.ttfts) < MAX_TTFTS_PER_SECOND:
                    bucket.ttfts.append(ttft)

    def points(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """One point per second from the first recorded second to now; quiet seconds are zeros.
        With `tenant`, the request figures are that tenant's alone and `cumulative_hit_rate` is its
        own over the window; token usage stays the server's level (SGLang's number, for everyone)."""
        with self._lock:
            self._bucket(self._clock())
            by_second = {b.second: b for b in self._seconds}
            first, last = self._seconds[0].second, self._seconds[-1].second
            own = by_second
            if tenant is not None:
                own = {b.second: b for b in self._by_tenant.get(tenant, ()) if b.second >= first}
        points: list[dict[str, Any]] = []
        last_hit_rate: float | None = None
        sums = [0, 0]  # a tenant's prompt and cached tokens so far
        for second in range(first, last + 1):
            level = by_second.get(second) or _Second(second)
            bucket = own.get(second) or _Second(second)
            recent = [
                t
                for s in range(second - PERCENTILE_WINDOW_S + 1, second + 1)
                for t in (own[s].ttfts if s in own else ())
            ]
            if tenant is not None:
                sums[0] += bucket.prompt_tokens
                sums[1] += bucket.cached_tokens
                last_hit_rate = sums[1] / sums[0] if sums[0] else last_hit_rate
            elif level.cache_hit_rate is not None:
                last_hit_rate = level.cache_hit_rate
            points.append(
                {
                    "t": second,
                    "requests": bucket.requests,
                    "hit_rate": bucket.cached_tokens / bucket.prompt_tokens if bucket.prompt_tokens else None,
                    "cumulative_hit_rate": last_hit_rate,
                    "token_usage": level.token_usage,
                    "prompt_tokens_per_s": bucket.prompt_tokens,
                    "embedding_tokens_per_s": bucket.embedding_tokens,
                    "output_tokens_per_s": bucket.completion_tokens,
                    "ttft_p50": percentile(recent, 50),
                    "ttft_p99": percentile(recent, 99),
                }
            )
        return points
