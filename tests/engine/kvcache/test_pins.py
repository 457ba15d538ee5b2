"""TTL pins on an injected clock: held through eviction until they expire, a hit restarts the TTL,
the budget releases the oldest pin (copied to the host first with HiCache), a tenant's cap and a
zero budget refuse with a reason, and an expired pin is evicted like any other node."""

from __future__ import annotations

import torch

from radixgate.engine.hicache.host_pool import HostPool
from radixgate.engine.hicache.tier_controller import TierController
from radixgate.engine.kvcache.kv_pool import KVPool
from radixgate.engine.kvcache.page_allocator import PageAllocator
from radixgate.engine.kvcache.pins import PinTable
from radixgate.engine.kvcache.radix_cache import RadixCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _tree(budget: int = 1000, tenant_cap=None) -> tuple[RadixCache, PinTable, Clock]:
    cache = RadixCache(1, lambda slots: None)
    clock = Clock()
    return cache, PinTable(cache, budget, clock=clock, tenant_cap=tenant_cap), clock


def _put(cache: RadixCache, key: list[int], ns=None):
    cache.insert(key, list(range(1000 * key[0], 1000 * key[0] + len(key))), ns)
    return cache.match_prefix(key, ns, count_hit=False)[1]


def _cached(cache: RadixCache, key: list[int], ns=None) -> int:
    return len(cache.match_prefix(key, ns, count_hit=False)[0])


def test_a_pin_holds_through_eviction_until_it_expires() -> None:
    cache, pins, clock = _tree()
    pinned = _put(cache, [1, 2, 3, 4])
    _put(cache, [5, 6, 7])
    assert pins.pin(pinned, 60.0, None) is None
    assert (cache.pinned_size, cache.evictable_size) == (4, 3)
    assert cache.evict(100) == 3  # only the unpinned prefix leaves
    assert _cached(cache, [1, 2, 3, 4]) == 4
    clock.now = 59.9
    assert cache.evict(100) == 0
    clock.now = 60.0
    assert cache.evict(100) == 4 and pins.num_expired == 1  # expired: an ordinary node again
    assert cache.pinned_size == cache.evictable_size == pins.num_pinned_tokens == 0


def test_each_hit_restarts_the_ttl() -> None:
    cache, pins, clock = _tree()
    node = _put(cache, [1, 2, 3])
    pins.pin(node, 10.0, None)
    for t in (8.0, 16.0, 24.0):  # a hit every 8 s keeps a 10 s pin alive
        clock.now = t
        pins.touch(cache.match([1, 2, 3, 9]).node)
        assert pins.expire() == 0
    clock.now = 34.0
    assert pins.expire() == 1


def test_pinning_again_keeps_the_longer_ttl() -> None:
    cache, pins, clock = _tree()
    node = _put(cache, [1, 2])
    pins.pin(node, 3600.0, None)
    clock.now = 100.0
    assert pins.pin(node, 300.0, None) is None and len(pins) == 1
    clock.now = 3000.0
    assert pins.expire() == 0


def test_past_the_budget_the_oldest_pin_is_released() -> None:
    cache, pins, _ = _tree(budget=6)
    first, second, third = _put(cache, [1, 2, 3]), _put(cache, [4, 5, 6]), _put(cache, [7, 8])
    assert pins.pin(first, 60.0, None) is None and pins.pin(second, 60.0, None) is None
    assert pins.pin(third, 60.0, None) is None  # 8 > 6: the oldest (first) is released
    assert pins.num_pinned_tokens == 5 and pins.num_released_over_budget == 1
    assert cache.evict(3) == 3 and _cached(cache, [1, 2, 3]) == 0 and _cached(cache, [4, 5, 6]) == 3


def test_shared_prefixes_count_once_and_stay_while_any_pin_holds_them() -> None:
    cache, pins, _ = _tree(budget=5)
    a, b = _put(cache, [1, 2, 3, 4]), _put(cache, [1, 2, 3, 9])
    shared = cache.match_prefix([1, 2, 3], None, count_hit=False)[1]
    assert pins.pin(a, 60.0, None) is None and pins.pin(b, 60.0, None) is None
    assert pins.num_pinned_tokens == 5  # [1, 2, 3] once, then 4 and 9
    pins._release(pins._pins[a])
    assert cache.evict(100) == 1 and shared.pin_ref == 1  # only the leaf of the released pin went


def test_refusals_say_why_and_change_nothing() -> None:
    cache, pins, _ = _tree(budget=0)
    assert "max_pinned_ratio 0" in pins.pin(_put(cache, [1, 2]), 60.0, None)
    cache, pins, _ = _tree(budget=4)
    assert "larger than the pin budget" in pins.pin(_put(cache, [1, 2, 3, 4, 5]), 60.0, None)
    cache, pins, _ = _tree(budget=100, tenant_cap=lambda ns: 3)
    assert pins.pin(_put(cache, [1, 2, 3], "a"), 60.0, "a") is None
    assert "this tenant's pins are at their cap (3 tokens)" in pins.pin(_put(cache, [4, 5], "a"), 60.0, "a")
    assert pins.pin(_put(cache, [6, 7], "b"), 60.0, "b") is None  # another tenant's share is its own
    assert pins.tokens_by_namespace == {"a": 3, "b": 2} and cache.pinned_size == 5 and pins.num_refused == 1


def test_a_lock_on_a_pinned_prefix_moves_it_between_the_columns() -> None:
    cache, pins, clock = _tree()
    node = _put(cache, [1, 2, 3])
    pins.pin(node, 10.0, None)
    cache.inc_lock_ref(node)
    assert (cache.protected_size, cache.pinned_size) == (3, 0)
    clock.now = 11.0
    pins.expire()  # expired while in use: protected until the request lets go, then evictable
    assert (cache.protected_size, cache.pinned_size, cache.evictable_size) == (3, 0, 0)
    cache.dec_lock_ref(node)
    assert cache.evictable_size == 3 and cache.evict(3) == 3


def test_flushes_drop_pins_with_their_nodes() -> None:
    cache, pins, _ = _tree()
    pins.pin(_put(cache, [1, 2], "a"), 60.0, "a")
    pins.pin(_put(cache, [3, 4], "b"), 60.0, "b")
    assert cache.reset_namespace("a")
    assert pins.tokens_by_namespace == {"b": 2} and cache.pinned_size == 2 and len(pins) == 1
    cache.reset()
    assert pins.num_pinned_tokens == cache.pinned_size == len(pins) == 0


def test_with_hicache_the_released_pin_is_copied_to_the_host_first() -> None:
    pool = KVPool(8, 1, 1, 1, torch.float32, "cpu")
    alloc = PageAllocator(8, 1)
    cache = RadixCache(1, lambda slots: alloc.free(list(slots)))
    hicache = TierController(pool, HostPool(8, 1, pool), None, "write_back")  # no copy until eviction
    hicache.attach(cache)
    clock = Clock()
    pins = PinTable(cache, 3, clock=clock)
    pins.demote = hicache.backup
    cache.insert([1, 2, 3], alloc.allocate(3))
    first = cache.match_prefix([1, 2, 3], count_hit=False)[1]
    pins.pin(first, 60.0, None)
    cache.insert([4, 5], alloc.allocate(2))
    assert first.host_slots is None
    pins.pin(cache.match_prefix([4, 5], count_hit=False)[1], 60.0, None)  # over 3: the first is released
    assert first.host_slots is not None and pins.tokens_by_tier() == {"device": 2, "host": 0}
