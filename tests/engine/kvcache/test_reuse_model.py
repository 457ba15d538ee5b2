"""The `reuse` eviction policy: what its model counts as seen again, and the order it learns. The
tree's books under the policy are checked by the state machines in test_radix_cache.py."""

from __future__ import annotations

import itertools

from radixgate.engine.kvcache.radix_cache import RadixCache
from radixgate.engine.kvcache.reuse_model import HIT_CREDIT_TURNOVERS


def _cache(policy="reuse"):
    freed: list[int] = []
    return RadixCache(1, freed.extend, policy), freed


def test_a_node_is_seen_again_by_a_hit_or_by_coming_back_after_eviction():
    cache, _ = _cache()
    model = cache.reuse
    filler = list(range(1000, 1030))  # held by a request throughout: the tree's turnover stays long
    cache.insert(filler, range(100, 130))
    cache.inc_lock_ref(cache.match_prefix(filler, count_hit=False)[1])
    doc = model.request_class(3, 0)  # three tokens, nothing cached
    cache.insert([1, 2, 3], [0, 1, 2])
    cache.match_prefix([1, 2, 3, 9])
    cache.match_prefix([1, 2, 3])  # a second hit counts nothing more
    assert model.num_seen[doc] == 1 and list(model.watch) == [(None, 0, tuple(filler[:16]))]
    cache.insert([4, 5, 6], [3, 4, 5])
    assert cache.evict(6) == 6  # both leave; [4, 5, 6] was never hit
    cache.insert([4, 5, 6], [6, 7, 8])  # the same document comes back
    assert model.num_seen[doc] == 2 and model.num_unseen[doc] == 0
    answer = model.request_class(4, 3)  # a question after a cached document: another class
    cache.insert([4, 5, 6, 7], [6, 7, 8, 9])
    assert answer != doc and list(model.watch.values())[-1][0] == answer


def test_a_node_not_seen_within_a_turnover_counts_against_its_class():
    cache, _ = _cache()
    model = cache.reuse
    cache.insert([100], [0])
    one_token = model.request_class(1, 0)
    slots = itertools.count(1)
    for i in range(30):  # the tree holds 3 tokens: a turnover is a few inserts long
        cache.insert([200 + i, 1, 2], [next(slots) for _ in range(3)])
        if cache.evictable_size > 3:
            cache.evict(cache.evictable_size - 3)
    assert model.num_unseen[one_token] == 1 and model.num_seen[one_token] == 0
    assert 0 < model.hit_credit <= HIT_CREDIT_TURNOVERS * 3 * 10  # a few ticks per turnover, not the clock


def test_a_class_that_never_comes_back_leaves_before_an_older_one_that_does():
    """One-token requests are never repeated, six-token documents always are: after some rounds
    a new one-token node leaves before an older document, the reverse of lru's order."""
    orders = {}
    for policy in ("reuse", "lru"):
        cache, freed = _cache(policy)
        slots = itertools.count()
        for i in range(40):
            doc = [1000 + 10 * i + j for j in range(6)]
            cache.insert([i], [next(slots)])
            cache.insert(doc, [next(slots) for _ in doc])
            cache.match_prefix(doc)
            if cache.evictable_size > 20:
                cache.evict(cache.evictable_size - 20)
        freed.clear()
        cache.insert(list(range(5000, 5006)), list(range(100, 106)))  # a document, then a one-token request
        cache.insert([6000], [200])
        while cache.evict(1):
            pass
        orders[policy] = [slot for slot in freed if slot in (100, 200)]
        if policy == "reuse":
            assert cache.reuse.rate(cache.reuse.request_class(1, 0)) < 0.1
            assert cache.reuse.rate(cache.reuse.request_class(6, 0)) > 0.9
    assert orders == {"reuse": [200, 100], "lru": [100, 200]}
