"""Per-second history for the dashboard: hit rate, token usage, TTFT percentiles, throughput.

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
    def __init__(self, window_s: int = 300, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self._clock = clock
        self._seconds: deque[_Second] = deque()
        self._lock = threading.Lock()

    def _bucket(self, now: float) -> _Second:
        second = int(now)
        if not self._seconds or self._seconds[-1].second != second:
            self._seconds.append(_Second(second))
        while self._seconds and self._seconds[0].second <= second - self.window_s:
            self._seconds.popleft()
        return self._seconds[-1]

    def sample(self, stats: dict[str, Any]) -> None:
        with self._lock:
            bucket = self._bucket(self._clock())
            bucket.token_usage = max(bucket.token_usage, float(stats.get("token_usage", 0.0)))
            bucket.cache_hit_rate = float(stats.get("cache_hit_rate", 0.0))

    def record(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int, ttft: float | None) -> None:
        with self._lock:
            bucket = self._bucket(self._clock())
            bucket.requests += 1
            bucket.prompt_tokens += prompt_tokens
            bucket.cached_tokens += cached_tokens
            bucket.completion_tokens += completion_tokens
            if ttft is not None and len(bucket.ttfts) < MAX_TTFTS_PER_SECOND:
                bucket.ttfts.append(ttft)

    def points(self) -> list[dict[str, Any]]:
        """One point per second from the first recorded second to now; quiet seconds are zeros."""
        with self._lock:
            self._bucket(self._clock())
            by_second = {b.second: b for b in self._seconds}
            first, last = self._seconds[0].second, self._seconds[-1].second
        points: list[dict[str, Any]] = []
        last_hit_rate: float | None = None
        for second in range(first, last + 1):
            bucket = by_second.get(second) or _Second(second)
            recent = [
                t
                for s in range(second - PERCENTILE_WINDOW_S + 1, second + 1)
                for t in (by_second[s].ttfts if s in by_second else ())
            ]
            if bucket.cache_hit_rate is not None:
                last_hit_rate = bucket.cache_hit_rate
            points.append(
                {
                    "t": second,
                    "requests": bucket.requests,
                    "hit_rate": bucket.cached_tokens / bucket.prompt_tokens if bucket.prompt_tokens else None,
                    "cumulative_hit_rate": last_hit_rate,
                    "token_usage": bucket.token_usage,
                    "prompt_tokens_per_s": bucket.prompt_tokens,
                    "output_tokens_per_s": bucket.completion_tokens,
                    "ttft_p50": percentile(recent, 50),
                    "ttft_p99": percentile(recent, 99),
                }
            )
        return points
