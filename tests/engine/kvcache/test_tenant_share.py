"""Tenant fair share: eviction takes first from tenants above their share (weights and the active
window included), falls back to policy order when only they are left, and caps each tenant's pins
at its share of the pin budget. Clocks are injected; nothing is timed."""

from __future__ import annotations

import random

import pytest

from radixgate.bench.retention import CacheSim, noisy_neighbour
from radixgate.engine.config import EngineConfig
from radixgate.engine.kvcache.eviction import EVICTION_POLICIES
from radixgate.engine.kvcache.radix_cache import RadixCache
from radixgate.engine.kvcache.slot_table import SlotTable
from radixgate.engine.kvcache.tenant_share import TenantShares
from radixgate.engine.protocol import SamplingParams
from radixgate.engine.scheduler.cache_manager import CacheManager
from radixgate.engine.scheduler.request import Req


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _tree(capacity: int = 20) -> tuple[RadixCache, TenantShares, Clock]:
    cache = RadixCache(1, lambda slots: None)
    clock = Clock()
    shares = TenantShares(capacity, window_s=10.0, clock=clock)
    cache.fair = shares
    return cache, shares, clock


def _put(cache: RadixCache, shares: TenantShares, ns: str, first: int, n: int) -> None:
    shares.seen(ns)
    cache.insert(list(range(first, first + n)), list(range(first, first + n)), ns)


def test_the_tenant_above_its_share_is_evicted_first_even_when_newer() -> None:
    cache, shares, _ = _tree()
    _put(cache, shares, "a", 0, 4)  # the oldest leaf: LRU alone would take it first
    for i in range(4):
        _put(cache, shares, "b", 100 + 10 * i, 4)  # b holds 16 of 20: above its half
    assert cache.evict(8) == 8
    assert cache.tokens_by_namespace == {"a": 4, "b": 8} and shares.num_fair_evictions == 2


def test_weights_set_the_shares() -> None:
    cache, shares, _ = _tree()
    shares.weights["a"] = 3.0  # a's share is 15 of 20, b's 5
    _put(cache, shares, "a", 0, 12)
    _put(cache, shares, "b", 100, 6)
    assert cache.evict(1) == 6 and cache.tokens_by_namespace["a"] == 12


def test_an_inactive_tenant_has_no_share() -> None:
    cache, shares, clock = _tree()
    _put(cache, shares, "a", 0, 4)
    clock.now = 11.0  # a has been quiet for longer than the window
    _put(cache, shares, "b", 100, 4)
    assert shares.fair_tokens() == {"b": 20}
    assert cache.evict(1) == 4 and cache.tokens_by_namespace == {"a": 0, "b": 4}


def test_when_only_tenants_within_their_share_are_left_policy_order_takes_over() -> None:
    cache, shares, _ = _tree()
    _put(cache, shares, "a", 0, 4)
    _put(cache, shares, "b", 100, 4)
    assert cache.evict(6) == 8 and cache.evictable_size == 0


def test_each_tenants_pins_are_capped_at_its_share_of_the_budget() -> None:
    sim = CacheSim(1024)  # pin budget 256
    sim.run(list(range(5000, 5010)), salt="b")
    first = sim.run(list(range(100, 201)), salt="a", pins=((100, 60.0),))
    second = sim.run(list(range(300, 401)), salt="a", pins=((100, 60.0),))
    assert first.pin_results[0][2] is None
    assert second.pin_results[0][2] == "this tenant's pins are at their cap (128 tokens)"
    sim.cache_manager.check_idle_invariant()


def test_the_noisy_neighbour_bench_shows_the_loss_and_the_fix() -> None:
    alone = noisy_neighbour(fairness=False, with_b=False, cycles=4)
    off = noisy_neighbour(fairness=False, with_b=True, cycles=4)
    on = noisy_neighbour(fairness=True, with_b=True, cycles=4)
    assert off < alone - 0.3 and abs(on - alone) <= 0.10


def _cached_keys(cache: RadixCache, ns: object = None) -> set[tuple[int, ...]]:
    """Every device prefix the tree holds (root to each node), as token tuples."""
    out, stack = set(), [(cache.root(ns), ())]
    while stack:
        node, prefix = stack.pop()
        for child in node.children.values():
            if child.device_slots is not None:
                out.add(prefix + tuple(child.key))
                stack.append((child, prefix + tuple(child.key)))
    return out


@pytest.mark.parametrize("policy", EVICTION_POLICIES)
def test_with_one_tenant_fair_share_evicts_what_policy_order_evicts(policy: str) -> None:
    """An untenanted server is one namespace: with fair share on it keeps exactly what it keeps off,
    also once its one tenant has been quiet past the active window."""
    rng = random.Random(7)
    plain = RadixCache(1, lambda slots: None, policy)
    clock = Clock()
    shares = TenantShares(64, window_s=10.0, clock=clock)
    fair = RadixCache(1, lambda slots: None, policy)
    fair.fair = shares
    shared = [[rng.randrange(1000) for _ in range(rng.randrange(2, 10))] for _ in range(6)]
    freed = {id(plain): 0, id(fair): 0}
    for step in range(300):
        key = rng.choice(shared) + [rng.randrange(1000) for _ in range(rng.randrange(0, 6))]
        clock.now = 0.0 if step < 150 else 100.0  # past the 10 s window: the tenant is inactive when evicting
        for cache in (plain, fair):
            slots, _ = cache.match_prefix(key)
            cache.insert(key, [*slots, *range(len(slots), len(key))])
            if cache.evictable_size > 40:
                freed[id(cache)] += cache.evict(cache.evictable_size - 40)
        if step < 150:
            shares.seen(None)
        assert _cached_keys(fair) == _cached_keys(plain), step
        assert fair.evictable_size == plain.evictable_size
    assert freed[id(plain)] == freed[id(fair)] > 500  # both evicted, the same tokens
    assert shares.num_fair_evictions > 0  # and the inactive tenant's leaves went by the fair path


def test_fair_share_is_on_in_a_default_engine() -> None:
    config = EngineConfig(max_total_tokens=256)
    manager = CacheManager.from_config(config, 256, SlotTable(2, 64, "cpu"), None)
    assert config.tenant_cache_fairness and manager.radix_cache is not None
    assert manager.radix_cache.fair is manager.shares
    off = CacheManager.from_config(EngineConfig(tenant_cache_fairness=False), 256, SlotTable(2, 64, "cpu"), None)
    assert off.radix_cache is not None and off.radix_cache.fair is None


def _run_together(sim: CacheSim, prompts: list[tuple[str, list[int]]]) -> list[Req]:
    """Submits the prompts at once (so they are in flight together) and runs them to their end."""
    reqs = [Req(f"together-{i}", ids, SamplingParams(max_new_tokens=1), salt) for i, (salt, ids) in enumerate(prompts)]
    for req in reqs:
        sim.scheduler.add(req)
    while any(r.finish_reason is None for r in reqs):
        batch = sim.scheduler.schedule()
        assert batch is not None, "the simulated engine stalled"
        sim.scheduler.process_result(
            batch, {id(r): 0 for r in batch.reqs if r.num_computed + r.extend_len == r.num_tokens}
        )
        for r in batch.reqs:
            if r.finish_reason is not None:
                sim.scheduler.remove(r)
    return reqs


@pytest.mark.parametrize("fairness", [True, False])
def test_a_tenant_whose_requests_in_flight_fill_its_share_evicts_its_own_leaves(fairness: bool) -> None:
    """The live bench's 1024-token pool at toy size: B's cached prompts are exactly its share (32 of
    64) and its next two come at once; the second needs room while the first is in flight. Counting
    B's in-flight and incoming pages toward its share, the room comes from B's own oldest prompt,
    not from A's working set (older in LRU order, within A's share)."""
    sim = CacheSim(64, tenant_cache_fairness=fairness)
    working_set = list(range(0, 16))
    sim.run(working_set, salt="a")
    sim.run(list(range(100, 116)), salt="b")
    sim.run(list(range(200, 216)), salt="b")  # b holds 32 of 64: its share; 16 tokens free
    _run_together(sim, [("b", list(range(300, 316))), ("b", list(range(400, 416)))])
    assert sim.cache_manager.shares.in_flight == {}  # nothing running: no in-flight tokens left
    sim.cache_manager.check_idle_invariant()
    again = sim.run(working_set, salt="a")
    assert again.cached_tokens == (15 if fairness else 0)  # all but the last token, computed to sample from
    cache = sim.cache_manager.radix_cache
    assert cache is not None and cache.tokens_by_namespace["b"] == (32 if fairness else 48)  # on: back to its share


def test_the_tokens_a_tenant_is_about_to_allocate_count_toward_its_share() -> None:
    """Nothing in flight, the pool full, each tenant at its share (32 of 64): B's next prompt needs
    room, and the 16 tokens it is about to allocate put B above its share, so B's own oldest prompt
    goes, not A's (the oldest in LRU order)."""
    sim = CacheSim(64)
    a_prompts = [list(range(16 * i, 16 * i + 16)) for i in range(2)]
    for ids in a_prompts:
        sim.run(ids, salt="a")
    for first in (100, 200):
        sim.run(list(range(first, first + 16)), salt="b")
    assert sim.cache_manager.available_tokens == 0
    sim.run(list(range(300, 316)), salt="b")
    assert [sim.run(ids, salt="a").cached_tokens for ids in a_prompts] == [15, 15]


def test_a_lone_tenant_evicting_for_its_own_requests_counts_no_fair_evictions() -> None:
    """With one active tenant its share is the whole pool; the pages it is about to allocate put it
    over that on every eviction, which is policy order, not fairness at work: not counted."""
    sim = CacheSim(64)
    for first in range(0, 320, 16):
        sim.run(list(range(first, first + 16)), salt="a")
    cache = sim.cache_manager.radix_cache
    assert cache is not None and cache.tokens_by_namespace["a"] <= 64 < 320  # it did evict
    assert sim.cache_manager.shares.num_fair_evictions == 0


@pytest.mark.parametrize("named", [True, False])
def test_a_decode_steps_new_pages_count_toward_their_tenants_share(named: bool, monkeypatch) -> None:
    """A holds its share (32 of 64) in two older prompts; B holds 16 and decodes a 15-token prompt
    until the pool is full. B's next decode page puts B above its share only if the step says whose
    page it is: named, B's own older prompt goes; unnamed (every tenant then at or under its share),
    policy order takes A's oldest prompt."""
    sim = CacheSim(64)
    cm = sim.cache_manager
    if not named:  # the decode step as it was: one count for everyone
        monkeypatch.setattr(
            cm, "ensure_decode_pages", lambda reqs: cm.ensure_free_pages(sum(cm.pages_needed(r, 1) for r in reqs))
        )
    a_prompts = [list(range(16 * i, 16 * i + 16)) for i in range(2)]
    for ids in a_prompts:
        sim.run(ids, salt="a")
    sim.run(list(range(100, 116)), salt="b")
    req = Req("b-decodes", list(range(200, 215)), SamplingParams(max_new_tokens=4, ignore_eos=True), "b")
    sim.scheduler.add(req)
    while req.finish_reason is None:
        batch = sim.scheduler.schedule()
        assert batch is not None, "the simulated engine stalled"
        sim.scheduler.process_result(
            batch, {id(r): 0 for r in batch.reqs if r.num_computed + r.extend_len == r.num_tokens}
        )
    sim.scheduler.remove(req)
    cm.check_idle_invariant()
    cached = [sim.run(ids, salt="a").cached_tokens for ids in a_prompts]
    assert cached == ([15, 15] if named else [0, 15])
