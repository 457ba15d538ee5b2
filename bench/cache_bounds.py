"""What a prefix cache could hit on a block trace, whatever its eviction policy: the references that
`radixgate bench trace` prints beside each policy. Plain Python over block ids; imports nothing of
the engine, so the references cannot share a bug with the cache they judge.

A trace (Mooncake's format) is one request a line: `timestamp` (ms), `input_length`,
`output_length` and `hash_ids`, one id per 512-token block of the input, equal ids meaning equal
blocks with equal prefixes (the ids hash the whole prefix up to their block).

- `infinite_hits`: a cache that never evicts. A request hits its leading blocks already seen.
- `belady_hits`: Belady's offline optimum for a cache of `capacity` blocks, admitting a block only
  when a request references it (as a radix cache does) and free to bypass: on a miss with the cache
  full, the block among the cached ones and the new one whose next counted use is farthest is not
  kept. It counts every cached block of a request as a hit, even after a missing one, and ignores
  that a running request's blocks must all be in the pool at once: a radix tree keeps whole prefixes
  only, so this is an upper bound on what any tree policy can reach with that pool, not a target.

`counted[i]` says whether request i's blocks count (the reporting part of a trace); every request
is replayed either way, so the cache is warm when counting starts.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TIME_PARTS",
    "TraceRequest",
    "belady_hits",
    "counted_part",
    "distinct_blocks",
    "infinite_hits",
    "load_trace",
    "split_by_time",
]

MOONCAKE_BLOCK_TOKENS = 512
_NEVER = float("inf")


@dataclass(frozen=True)
class TraceRequest:
    timestamp_ms: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def load_trace(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    """A Mooncake-format JSON-lines trace, in arrival order (stable for equal timestamps)."""
    requests = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if limit is not None and len(requests) >= limit:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                requests.append(
                    TraceRequest(
                        int(row["timestamp"]),
                        int(row["input_length"]),
                        int(row.get("output_length", 0)),
                        tuple(int(h) for h in row["hash_ids"]),
                    )
                )
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{number}: not a Mooncake trace line ({e!r})") from e
    return sorted(requests, key=lambda r: r.timestamp_ms)


def split_by_time(requests: Sequence[TraceRequest]) -> tuple[list[bool], list[bool]]:
    """(first, second): whether each request arrives before, or at and after, the middle of the trace's span."""
    if not requests:
        return [], []
    middle = (requests[0].timestamp_ms + requests[-1].timestamp_ms) / 2
    first = [r.timestamp_ms < middle for r in requests]
    return first, [not f for f in first]


# A trace's parts by time: all, its halves, and its quarters (q1 tunes, q2 checks, the second half reports).
TIME_PARTS = ("all", "first", "second", "q1", "q2", "q3", "q4")


def counted_part(requests: Sequence[TraceRequest], part: str) -> list[bool]:
    """Whether each request falls in `part` of the trace's time span (`TIME_PARTS`); a quarter is a
    quarter of the span from the first to the last timestamp, the last one closed at its end."""
    if part not in TIME_PARTS:
        raise ValueError(f"part must be one of {TIME_PARTS}, got {part!r}")
    if part == "all":
        return [True] * len(requests)
    if part in ("first", "second"):
        return split_by_time(requests)[part == "second"]
    if not requests:
        return []
    start, span = requests[0].timestamp_ms, requests[-1].timestamp_ms - requests[0].timestamp_ms
    quarter = int(part[1]) - 1
    # min(3, ...): the last request, at the span's very end, belongs to the fourth quarter
    return [min(3, int(4 * (r.timestamp_ms - start) / span)) == quarter if span else quarter == 0 for r in requests]


def distinct_blocks(requests: Iterable[TraceRequest]) -> int:
    return len({h for r in requests for h in r.hash_ids})


def infinite_hits(requests: Sequence[TraceRequest], counted: Sequence[bool]) -> tuple[int, int]:
    """(blocks hit, blocks counted) for a cache that keeps everything."""
    seen: set[int] = set()
    hits = total = 0
    for request, count in zip(requests, counted, strict=True):
        n = 0
        while n < len(request.hash_ids) and request.hash_ids[n] in seen:
            n += 1
        if count:
            hits, total = hits + n, total + len(request.hash_ids)
        seen.update(request.hash_ids)
    return hits, total


def belady_hits(requests: Sequence[TraceRequest], counted: Sequence[bool], capacity: int) -> tuple[int, int]:
    """(blocks hit, blocks counted) for Belady's optimum with `capacity` blocks (an upper bound, see above)."""
    refs = [(h, c) for r, c in zip(requests, counted, strict=True) for h in r.hash_ids]
    # next_counted[i]: the next position after i where refs[i]'s block is referenced and counted
    next_counted: list[float] = [_NEVER] * len(refs)
    upcoming: dict[int, float] = {}
    for i in range(len(refs) - 1, -1, -1):
        block, count = refs[i]
        next_counted[i] = upcoming.get(block, _NEVER)
        if count:
            upcoming[block] = i
    cached: dict[int, float] = {}  # block -> its next counted use
    farthest: list[tuple[float, int]] = []  # (-next use, block), lazily invalidated
    hits = total = 0
    for i, (block, count) in enumerate(refs):
        total += count
        nxt = next_counted[i]
        if block in cached:
            hits += count
        elif len(cached) >= capacity:
            while farthest and cached.get(farthest[0][1]) != -farthest[0][0]:
                heapq.heappop(farthest)  # stale: evicted, or used since
            if not farthest or -farthest[0][0] <= nxt:
                continue  # bypass: nothing cached is needed later than this block
            del cached[heapq.heappop(farthest)[1]]
        if capacity > 0:
            cached[block] = nxt
            heapq.heappush(farthest, (-nxt, block))
    return hits, total
