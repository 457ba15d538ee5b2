"""The `template` eviction policy: credit on a returning template's static prefix (template_credit.py)."""

from __future__ import annotations

import heapq
from types import SimpleNamespace

import pytest

import radixgate.engine.kvcache.tenant_share as tenant_share
from radixgate.engine.kvcache.radix_cache import RadixCache
from radixgate.engine.kvcache.template_credit import give_credit
from radixgate.engine.kvcache.tenant_share import TenantShares


def _tree(policy: str, freed: list[int]) -> RadixCache:
    cache = RadixCache(1, freed.extend, policy)
    for first in (1, 2, 3, 4):  # leaves A..D, A oldest
        cache.insert([first, first], [10 * first, 10 * first + 1])
    return cache


def _order(cache: RadixCache, freed: list[int]) -> str:
    order = ""
    while cache.evict(2):
        order += "ABCD"[freed[-1] // 10 - 1]
    return order


@pytest.mark.parametrize("policy", ["template", "lru"])
def test_credit_keeps_the_static_prefix_only_under_the_template_policy(policy):
    freed: list[int] = []
    cache = _tree(policy, freed)
    assert give_credit(cache, [1, 1], None, requests=8, num_requests=4) == 2
    assert _order(cache, freed) == ("BCDA" if policy == "template" else "ABCD")
    assert cache.evictable_size == cache.total_size() == 0


def test_credit_is_given_to_the_prefix_alone_splitting_the_node_it_ends_in():
    freed: list[int] = []
    cache = RadixCache(1, freed.extend, "template")
    cache.insert([1, 2, 3, 4], [0, 1, 2, 3])  # one node; the static prefix is its first two tokens
    cache.insert([9, 9], [8, 9])
    assert give_credit(cache, [1, 2], None, requests=100, num_requests=1) == 2
    static, _ = cache.match_prefix([1, 2], count_hit=False)
    node = cache.match_prefix([1, 2], count_hit=False)[1]
    assert static == [0, 1] and node.credit > 0 and node.children  # split: [1, 2] above [3, 4]
    assert next(iter(node.children.values())).credit == 0
    cache.evict(2)  # the dynamic tail [3, 4] goes first (older than [9, 9] and uncredited)
    assert freed == [2, 3]
    cache.evict(2)
    assert freed[-2:] == [8, 9]  # then [9, 9]; the credited prefix stays
    assert cache.match_prefix([1, 2])[0] == [0, 1]


def test_a_credit_never_lowers_and_a_mismatch_stops_the_walk():
    cache = RadixCache(1, lambda s: None, "template")
    cache.insert([1, 2, 3, 4], [0, 1, 2, 3])
    give_credit(cache, [1, 2, 3, 4], None, requests=50, num_requests=1)
    high = cache.match_prefix([1, 2, 3, 4], count_hit=False)[1].credit
    give_credit(cache, [1, 2, 3, 4], None, requests=1, num_requests=1)
    assert cache.match_prefix([1, 2, 3, 4], count_hit=False)[1].credit == high
    assert give_credit(cache, [1, 7, 7], None, requests=5, num_requests=1) == 1  # stops where [1, 7] differs
    assert give_credit(cache, [5, 5], "other tenant", requests=5, num_requests=1) == 0


def test_a_tenant_over_its_share_with_nothing_evictable_stops_the_fair_pass_at_once(monkeypatch):
    """Tenant a holds more than its share, all of it locked: the fair pass must not pop b's leaves
    one by one looking for a's; it goes straight to policy order (b's oldest leaf)."""
    freed: list[int] = []
    cache = RadixCache(1, freed.extend, "lru")
    shares = TenantShares(16)
    cache.fair = shares
    shares.seen("a")
    shares.seen("b")
    cache.insert(list(range(100, 110)), list(range(100, 110)), "a")  # 10 of 16: over a's 8
    cache.inc_lock_ref(cache.match_prefix(list(range(100, 110)), "a")[1])
    for first in (1, 2, 3):
        cache.insert([first, first], [10 * first, 10 * first + 1], "b")
    assert cache.evictable_by_namespace["a"] == 0 and cache.evictable_by_namespace["b"] == 6
    live_pops = []

    def counting_pop(heap):
        entry = heapq.heappop(heap)
        live_pops.extend([entry] if cache._is_live(entry) else [])  # a's entries went stale when locked
        return entry

    monkeypatch.setattr(tenant_share, "heapq", SimpleNamespace(heappop=counting_pop, heappush=heapq.heappush))
    assert cache.evict(2) == 2
    assert freed == [10, 11]  # b's oldest, in policy order
    assert len(live_pops) == 1  # b's oldest leaf only: none of b's was popped and set aside first
    assert cache.evictable_by_namespace["b"] == 4
    assert sum(cache.evictable_by_namespace.values()) == cache.evictable_size
