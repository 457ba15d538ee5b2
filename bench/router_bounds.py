"""The references `radixgate bench router` judges routers by, computed over the requests as sent
and one cache of the workers' *summed* pool size. Token-level, plain Python: it imports nothing of
the router, the engine or `RadixCache`, so it cannot share a bug with what it judges.

A token here is a token *position*: the token with its whole prefix (a chained hash), so two prompts
share a cached token exactly when they share the prefix up to it, as in a prefix cache. A prompt's
last token is never counted as a hit (the engine always computes it), but it is cached.

- `belady_bound`: Belady's offline optimum for one cache of `capacity` token positions, admitting a
  position only when a request references it, free to bypass. No router over pools summing to
  `capacity` can hit more: at every moment the union of the workers' caches holds at most
  `capacity` positions, each admitted when a request referenced it, so the union is one such cache,
  and Belady maximises hits over every such cache. It counts every cached position of a prompt,
  even past a missing one, and ignores that a running request must hold its whole prompt: a
  relaxation, so an upper bound, not a target.
- `lru_reference`: one LRU prefix cache of `capacity` tokens fed the same requests in the same
  order (hits: the leading positions held; a prompt's tokens become most recent, its first token
  last, so a shared prefix outlives its tails). A reference, not a bound: a router over several
  pools can beat it.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence

_NEVER = float("inf")


def positions(ids: Sequence[int], namespace: object = None) -> list[int]:
    """The chained hash of each token position of `ids` (the chain starts from the namespace)."""
    h = hash(("prefix", str(namespace)))
    out = []
    for token in ids:
        h = hash((h, token))
        out.append(h)
    return out


def _refs(prompts: Sequence[tuple[object, Sequence[int]]]) -> tuple[list[int], list[bool]]:
    refs: list[int] = []
    counted: list[bool] = []
    for namespace, ids in prompts:
        refs += positions(ids, namespace)
        counted += [True] * (len(ids) - 1) + [False] * min(1, len(ids))
    return refs, counted


def belady_bound(prompts: Sequence[tuple[object, Sequence[int]]], capacity: int) -> float:
    """Hit rate (hit tokens / prompt tokens) of Belady's optimum over one cache of `capacity` tokens."""
    refs, counted = _refs(prompts)
    if not refs:
        return 0.0
    # nxt[i]: the next position after i where refs[i] is referenced and counted (uncounted uses
    # never pay for keeping a token)
    nxt: list[float] = [_NEVER] * len(refs)
    upcoming: dict[int, float] = {}
    for i in range(len(refs) - 1, -1, -1):
        nxt[i] = upcoming.get(refs[i], _NEVER)
        if counted[i]:
            upcoming[refs[i]] = i
    cached: dict[int, float] = {}  # token position -> its next counted use
    farthest: list[tuple[float, int]] = []  # (-next use, position), lazily invalidated
    hits = 0
    for i, ref in enumerate(refs):
        if ref in cached:
            hits += counted[i]
        elif len(cached) >= capacity:
            while farthest and cached.get(farthest[0][1]) != -farthest[0][0]:
                heapq.heappop(farthest)  # stale: evicted, or used since
            if not farthest or -farthest[0][0] <= nxt[i]:
                continue  # bypass: nothing cached is needed later than this one
            del cached[heapq.heappop(farthest)[1]]
        if capacity > 0:
            cached[ref] = nxt[i]
            heapq.heappush(farthest, (-nxt[i], ref))
    return hits / len(refs)


class PrefixLRU:
    """One LRU prefix cache of `capacity` token positions."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._cache: OrderedDict[int, None] = OrderedDict()

    def serve(self, namespace: object, ids: Sequence[int]) -> int:
        """The prompt's cached leading tokens (the last one is always computed); then caches it all."""
        pos = positions(ids, namespace)
        n = 0
        while n < len(pos) - 1 and pos[n] in self._cache:
            n += 1
        for h in reversed(pos):
            self._cache[h] = None
            self._cache.move_to_end(h)
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return n


def lru_reference(prompts: Sequence[tuple[object, Sequence[int]]], capacity: int) -> float:
    """Hit rate of one LRU prefix cache of `capacity` tokens fed `prompts` in order."""
    cache = PrefixLRU(capacity)
    hits = total = 0
    for namespace, ids in prompts:
        hits, total = hits + cache.serve(namespace, ids), total + len(ids)
    return hits / total if total else 0.0
