"""Eviction policies: each one's order on a small tree, a bad name refused at every door, HiCache
demotion under every policy, and the policy reaching the engine's own cache. The radix cache's
books under every policy are checked by the state machines in test_radix_cache.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import settings
from hypothesis.stateful import initialize

from radixgate.engine.config import EngineConfig
from radixgate.engine.hicache.host_pool import HostPool
from radixgate.engine.hicache.tier_controller import TierController
from radixgate.engine.kvcache.eviction import EVICTION_POLICIES
from radixgate.engine.kvcache.kv_pool import KVPool
from radixgate.engine.kvcache.page_allocator import PageAllocator
from radixgate.engine.kvcache.radix_cache import RadixCache
from radixgate.engine.protocol import SamplingParams
from radixgate.gateway import cli

# Leaves A, B, C, D (two tokens each, inserted in that order, with request priorities 0, 2, 1, 0),
# then A matched 3 times, B twice, C once: last access A < B < C, D oldest; hits A 3, B 2, C 1, D 0.
EXPECTED_ORDER = {
    "lru": "DABC",
    "lfu": "DCBA",
    "slru": "DCAB",  # A and B were hit twice: protected; inside each segment, LRU
    "priority": "DACB",
    "fifo": "ABCD",
    "mru": "CBAD",
    "filo": "DCBA",
    "template": "DABC",  # no credit given: lru's order (test_template_credit.py gives some)
}


@pytest.mark.parametrize("policy", EVICTION_POLICIES)
def test_each_policy_evicts_in_its_order(policy):
    freed: list[int] = []
    cache = RadixCache(1, freed.extend, policy)
    leaves = {"A": [1, 1], "B": [2, 2], "C": [3, 3], "D": [4, 4]}
    for name, priority in zip("ABCD", (0, 2, 1, 0), strict=True):
        cache.insert(leaves[name], [10 * leaves[name][0], 10 * leaves[name][0] + 1], priority=priority)
    for name, times in (("A", 3), ("B", 2), ("C", 1)):
        for _ in range(times):
            assert len(cache.match_prefix(leaves[name])[0]) == 2
    order = ""
    while cache.evict(2):
        order += "ABCD"[freed[-1] // 10 - 1]
    assert order == EXPECTED_ORDER[policy]
    assert cache.evictable_size == cache.protected_size == cache.total_size() == 0


def test_a_lookup_that_is_no_hit_leaves_the_counts_alone():
    cache = RadixCache(1, lambda slots: None, "lfu")
    cache.insert([1, 2], [0, 1])
    cache.match_prefix([1, 2], count_hit=False)
    assert cache.match_prefix([1, 2], count_hit=False)[1].hit_count == 0
    assert cache.match_prefix([1, 2])[1].hit_count == 1


def test_a_bad_policy_name_is_refused_naming_the_field_and_the_choices(capsys):
    for make in (lambda: RadixCache(1, lambda s: None, "lfru"), lambda: EngineConfig(radix_eviction_policy="lfru")):
        with pytest.raises(ValueError, match=r"radix_eviction_policy must be one of \('lru', 'lfu'.*got 'lfru'"):
            make()
    assert cli.main(["--radix-eviction-policy", "lfru"]) == 2  # refused before anything starts
    assert "radixgate serve: radix_eviction_policy must be one of ('lru'," in capsys.readouterr().err
    args = cli.build_parser().parse_args(["--radix-eviction-policy", "slru"])
    assert cli.engine_config(args).radix_eviction_policy == "slru"
    assert cli.engine_config(cli.build_parser().parse_args([])).radix_eviction_policy == "lru"


# The tiered-tree state machine of tests/engine/hicache, run again with the device tier's policy drawn.
_spec = importlib.util.spec_from_file_location(
    "tiered_tree_machine", Path(__file__).parents[1] / "hicache" / "test_tree_tiers.py"
)
assert _spec is not None and _spec.loader is not None
_tiers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tiers)


class TieredTreeUnderPolicies(_tiers.TieredTree):
    @initialize(policy=st.sampled_from(["write_through", "write_back"]), eviction=st.sampled_from(EVICTION_POLICIES))
    def start(self, policy, eviction="lru"):
        n = _tiers.DEVICE
        self.pool = KVPool(n, 1, 1, 1, torch.float32, "cpu")
        self.alloc = PageAllocator(n, 1)
        self.tree = RadixCache(1, lambda slots: self.alloc.free(list(slots)), eviction)
        self.hicache = TierController(self.pool, HostPool(_tiers.HOST, 1, self.pool), None, policy)
        self.hicache.attach(self.tree)


TestTieredTreeUnderPolicies = TieredTreeUnderPolicies.TestCase
TestTieredTreeUnderPolicies.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


@pytest.mark.parametrize(("eviction", "evicts_popular"), [("lru", True), ("lfu", False), ("mru", False)])
def test_demotion_moves_the_node_the_policy_picks_to_the_host(eviction, evicts_popular):
    machine = TieredTreeUnderPolicies()
    machine.start("write_back", eviction)
    popular, recent = [1, 2, 3, 4], [2, 3, 4, 1]
    machine.compute_and_insert(popular)
    machine.compute_and_insert(recent)
    for _ in range(3):
        machine.tree.match(popular)
    machine.tree.match(recent)  # the most recent, hit once
    machine.tree.evict(1)
    gone, kept = (popular, recent) if evicts_popular else (recent, popular)
    m = machine.tree.match(gone)
    assert not m.device_slots and len(m.host_slots) == len(gone), "demoted: host-only, still in the tree"
    assert len(machine.tree.match(kept).device_slots) == len(kept)
    machine.books_balance()


@pytest.mark.parametrize(("policy", "kept"), [("lru", False), ("lfu", True)])
def test_the_engines_own_cache_follows_the_policy(make_engine, policy, kept):
    """A prompt sent three times, then fillers overflowing the pool: lfu keeps the popular prefix, lru
    drops it as the oldest."""
    engine = make_engine(max_total_tokens=512, radix_eviction_policy=policy)
    assert engine.cache_manager.radix_cache.eviction_policy == policy
    once = SamplingParams(max_new_tokens=1, temperature=0.0)
    popular = [7] * 100
    for _ in range(3):
        engine.generate(input_ids=[popular], sampling=once)
    for i in range(6):
        engine.generate(input_ids=[[100 + i] * 100], sampling=once)
    cached = engine.generate(input_ids=[popular], sampling=once)[0].cached_tokens
    assert cached == (99 if kept else 0)
