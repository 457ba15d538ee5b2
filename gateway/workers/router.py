"""Which worker serves a request: the routing policies and the approximate prefix index behind `cache_aware`.

The index is the router's guess of what each worker holds, built from the token prefixes it
routed there (it never sees an engine's evictions, so it models each pool as an LRU of the
pool's capacity). Prefixes are chains of hashed blocks seeded with the tenant's cache salt, so a
prefix routed under one salt is never a hit for another, as in the salted engine.

`cache_aware` scores each worker from what the workers say: the prefix it holds (exact from its KV
events when in sync, else the guess), its pool size (from `/server_info`) and the load the router
has in flight there. One score, in prefill-token times: prompt tokens it would prefill + the queue
ahead of the request (tokens to prefill and decode there + `overhead_tokens` per request) +
`affinity` x the tokens of the prefix some other worker holds, or was sent before, that this one
does not (copying a prefix onto a second full pool evicts what would be hit later). A prefix's home
(where the router sent it) is remembered for `home_factor` pools' worth of blocks, longer than any
pool keeps it, so a prefix that every worker evicted goes back to the same one. A prefix that no
worker holds or was sent for as much as `new_prefix_share` of the prompt is new: it goes, among the
workers whose queue is within the request's own prefill of the shortest, to the one with the least
content homed on it for its pool size (the blocks whose home it is: where they will keep going), so
prefixes partition across the workers instead of every worker caching the hot ones. Affinity holds
under load imbalance up to what the copy would cost; a hard guard remains: a
worker more than `balance_slack` requests above the least busy one is not a candidate.
`route_hint` (OpenAI's `prompt_cache_key`, the SDK's `static_prefix_hash`) sends a prefix no worker
holds yet to where that hint went before. The weights (affinity 8, slack 12, 64 tokens a request)
come from the TUNING presets of `radixgate bench router --preset tuning --simulate` only
(`bench/router_presets.py`, docs/gateway.md).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

POLICIES = ("round_robin", "least_load", "cache_aware")
BLOCK_TOKENS = 16


def block_hashes(input_ids: Sequence[int], cache_salt: str | None, block_tokens: int = BLOCK_TOKENS) -> list[int]:
    """Chained hashes of the full blocks of `input_ids`; the chain starts from the salt, so two
    tenants' identical prompts share no hash."""
    h = hash(("radixgate-prefix", cache_salt))
    hashes = []
    for start in range(0, len(input_ids) - block_tokens + 1, block_tokens):
        h = hash((h, tuple(input_ids[start : start + block_tokens])))
        hashes.append(h)
    return hashes


class PrefixIndex:
    """One worker's cached prefixes as the router believes them: an LRU set of block hashes,
    at most `capacity_blocks` of them (the worker's KV capacity)."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = max(1, capacity_blocks)
        self._blocks: OrderedDict[int, Hashable] = OrderedDict()  # hash -> salt, oldest first

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of a prompt the worker holds."""
        n = 0
        for h in hashes:
            if h not in self._blocks:
                break
            n += 1
        return n

    def record(self, hashes: Sequence[int], cache_salt: str | None) -> None:
        """The prompt was routed here: its blocks become most recent, the prefix's first block last,
        so a shared prefix outlives the tails that hang off it; the oldest blocks beyond capacity go."""
        for h in reversed(hashes):
            if h in self._blocks:
                self._blocks.move_to_end(h)
            else:
                self._blocks[h] = cache_salt
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def clear(self, cache_salt: str | None = None, *, everything: bool = True) -> None:
        """Forget every block, or (everything=False) only those of one salt."""
        if everything:
            self._blocks.clear()
            return
        for h in [h for h, salt in self._blocks.items() if salt == cache_salt]:
            del self._blocks[h]


@dataclass
class Candidate:
    """What the router knows of one worker: its index and the load it routed there."""

    worker_id: str
    index: PrefixIndex
    num_requests: int = 0  # in flight through this gateway
    num_tokens: int = 0  # of those: prompt tokens to prefill + tokens to decode
    # The worker's exact cache from its KV events (kv_index.KVEventIndex), when it publishes them.
    exact: Any = None

    def matched_tokens(self, input_ids: Sequence[int], cache_salt: str | None, hashes: Sequence[int]) -> int:
        """The prefix the worker holds: exact while its KV-event index is in sync, else the guess."""
        if self.exact is not None and self.exact.is_synced:
            return int(self.exact.match_tokens(input_ids, cache_salt))
        return self.index.match(hashes) * BLOCK_TOKENS


@dataclass(frozen=True)
class Choice:
    worker_id: str
    matched_tokens: int  # the router's estimate of the prefix the worker holds
    cost_tokens: int  # expected tokens to prefill (for the request's own load accounting)
    best_tokens: int = 0  # the longest prefix any candidate held (what the best choice would have hit)
    is_exact: bool = False  # the estimate came from the worker's KV events


@dataclass
class Router:
    """Stateless apart from the round-robin counter and the hints; the pool owns the candidates."""

    policy: str = "cache_aware"
    block_tokens: int = BLOCK_TOKENS
    balance_slack: int = 12
    affinity: float = 8.0  # cost per token of a prefix another worker holds, copied here onto a full pool
    new_prefix_share: float = 0.5  # below this share of the prompt held anywhere, the prefix is new: partition
    overhead_tokens: int = 64  # a request's fixed cost in the queue, in prefill-token times
    max_hints: int = 100_000
    _counter: itertools.count = field(default_factory=itertools.count)
    _hints: OrderedDict[tuple[str | None, str], str] = field(default_factory=OrderedDict)
    home_factor: int = 8  # a prefix's home outlives its KV: remembered for this many pools' worth of blocks
    _homes: dict[str, PrefixIndex] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown router policy '{self.policy}'; choose one of {', '.join(POLICIES)}")

    def choose(
        self,
        candidates: Sequence[Candidate],
        input_ids: Sequence[int],
        cache_salt: str | None,
        route_hint: str | None = None,
    ) -> Choice:
        """Pick one of `candidates` (non-empty) and record the prompt in its index."""
        assert candidates, "choose needs at least one candidate"
        hashes = block_hashes(input_ids, cache_salt, self.block_tokens)
        matched = {c.worker_id: c.matched_tokens(input_ids, cache_salt, hashes) for c in candidates}
        # Where the router sent this prefix before (its home, kept longer than any pool keeps it): a
        # prefix that every worker evicted goes back to one worker instead of being copied onto several.
        homes = [self._home(c) for c in candidates]
        routed = {c.worker_id: h.match(hashes) * self.block_tokens for c, h in zip(candidates, homes, strict=True)}
        if self.policy == "round_robin":
            chosen = candidates[next(self._counter) % len(candidates)]
        elif self.policy == "least_load":
            chosen = min(candidates, key=lambda c: (c.num_requests, c.num_tokens))
        else:
            chosen = self._cache_aware(candidates, matched, routed, len(input_ids), cache_salt, route_hint)
        chosen.index.record(hashes, cache_salt)
        self._home(chosen).record(hashes, cache_salt)
        if route_hint is not None:
            self._hints[(cache_salt, route_hint)] = chosen.worker_id
            self._hints.move_to_end((cache_salt, route_hint))
            if len(self._hints) > self.max_hints:
                self._hints.popitem(last=False)
        num_matched = matched[chosen.worker_id]
        is_exact = chosen.exact is not None and chosen.exact.is_synced
        return Choice(
            chosen.worker_id, num_matched, max(0, len(input_ids) - num_matched), max(matched.values()), is_exact
        )

    def _cache_aware(
        self,
        candidates: Sequence[Candidate],
        matched: dict[str, int],
        routed: dict[str, int],
        num_tokens: int,
        cache_salt: str | None,
        route_hint: str | None,
    ) -> Candidate:
        least = min(c.num_requests for c in candidates)
        allowed = [c for c in candidates if c.num_requests <= least + self.balance_slack]
        held = {c.worker_id: max(matched[c.worker_id], routed[c.worker_id]) for c in candidates}
        best = max(held[c.worker_id] for c in allowed)
        if route_hint is not None and best == 0:
            hinted = self._hints.get((cache_salt, route_hint))
            for c in allowed:
                if c.worker_id == hinted:
                    return c
        load = {c.worker_id: c.num_tokens + self.overhead_tokens * c.num_requests for c in allowed}
        if best < self.new_prefix_share * num_tokens:
            # A new prefix: to the worker with the least content homed on it for its pool (a prefix
            # keeps going to its home, so that is what the worker will have to hold), so that prefixes
            # partition across the workers instead of every worker caching the hot ones. Among the
            # workers whose queue is within this request's own prefill of the shortest.
            shortest = min(load.values())
            near = [c for c in allowed if load[c.worker_id] <= shortest + num_tokens]
            return min(near, key=lambda c: (len(self._home(c)) / c.index.capacity_blocks, load[c.worker_id]))

        def cost(c: Candidate) -> tuple[float, int]:
            # prefill here + the queue ahead + copying a prefix another worker holds (or is its home)
            miss = num_tokens - matched[c.worker_id]
            copy = self.affinity * (best - held[c.worker_id])
            return miss + copy + load[c.worker_id], c.num_requests

        return min(allowed, key=cost)

    def _home(self, c: Candidate) -> PrefixIndex:
        home = self._homes.get(c.worker_id)
        if home is None:
            home = self._homes[c.worker_id] = PrefixIndex(c.index.capacity_blocks * self.home_factor)
        home.capacity_blocks = c.index.capacity_blocks * self.home_factor
        return home

    def forget_worker(self, worker_id: str) -> None:
        self._homes.pop(worker_id, None)
        for key in [k for k, w in self._hints.items() if w == worker_id]:
            del self._hints[key]
