"""The radix tree with a host tier, against its invariants, under random inserts, matches with
load-back, and evictions in both tiers. Each token's KV is its own id, so every move between
tiers can be checked for the bytes it carries."""

from __future__ import annotations

import hypothesis.strategies as st
import torch
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from radixgate.engine.hicache.host_pool import HostPool
from radixgate.engine.hicache.tier_controller import TierController
from radixgate.engine.kvcache.kv_pool import KVPool
from radixgate.engine.kvcache.page_allocator import PageAllocator
from radixgate.engine.kvcache.radix_cache import RadixCache

DEVICE, HOST = 16, 12
seqs = st.lists(st.integers(1, 4), min_size=1, max_size=10)


class TieredTree(RuleBasedStateMachine):
    @initialize(policy=st.sampled_from(["write_through", "write_back"]))
    def start(self, policy):
        self.pool = KVPool(DEVICE, 1, 1, 1, torch.float32, "cpu")
        self.alloc = PageAllocator(DEVICE, 1)
        self.tree = RadixCache(1, lambda slots: self.alloc.free(list(slots)))
        self.hicache = TierController(self.pool, HostPool(HOST, 1, self.pool), None, policy)
        self.hicache.attach(self.tree)

    def _device_slots(self, n):
        if not self.alloc.can_allocate(n):
            self.tree.evict(n - self.alloc.num_free_pages)
        return self.alloc.allocate(n) if self.alloc.can_allocate(n) else None

    def _kv(self, slots, pool):
        k, v = pool.read(torch.tensor(slots, dtype=torch.int64)) if pool is self.pool else pool.read(list(slots))
        return [int(x) for x in k[0].flatten()], [int(x) for x in v[0].flatten()]

    @rule(seq=seqs)
    def compute_and_insert(self, seq):
        slots = self._device_slots(len(seq))
        if slots is None:
            return
        kv = torch.tensor(seq, dtype=torch.float32).view(-1, 1, 1)
        self.pool.write(torch.tensor(slots, dtype=torch.int64), [kv], [-kv])
        existing = self.tree.insert(seq, slots)
        self.alloc.free(slots[:existing])
        self.hicache.on_insert(self.tree.match_prefix(seq)[1])

    @rule(seq=seqs)
    def match_and_load_back(self, seq):
        m = self.tree.match(seq)
        n_dev, n_host = len(m.device_slots), len(m.host_slots)
        assert self._kv(m.device_slots, self.pool) == (seq[:n_dev], [-t for t in seq[:n_dev]])
        assert self._kv(m.host_slots, self.hicache.host) == (
            seq[n_dev : n_dev + n_host],
            [-t for t in seq[n_dev : n_dev + n_host]],
        )
        self.tree.inc_lock_ref(m.node)
        self.hicache.lock_host(m.host_node)
        new = self._device_slots(n_host) if n_host else []
        if new is not None:
            self.hicache.load(new, m.host_slots, None)
            loaded = seq[n_dev : n_dev + n_host]
            assert self._kv(new, self.pool) == (loaded, [-t for t in loaded])
        self.hicache.unlock_host(m.host_node)
        if new:
            existing = self.tree.insert(seq[: n_dev + n_host], m.device_slots + new)
            assert existing == n_dev, "the loaded part must be adopted by the host-only nodes"
            assert self.tree.match(seq).device_slots == m.device_slots + new
        self.tree.dec_lock_ref(m.node)

    @rule(n=st.integers(1, DEVICE))
    def evict_device(self, n):
        self.tree.evict(n)

    @rule(n=st.integers(1, HOST))
    def evict_host(self, n):
        self.hicache.evict_host(n)

    @invariant()
    def books_balance(self):
        tree = self.tree
        nodes = list(tree.iter_nodes())
        assert self.alloc.available_tokens + tree.evictable_size + tree.protected_size == DEVICE
        assert tree.protected_size == 0 and tree.total_size() == tree.evictable_size
        self.hicache.check_idle_invariant()
        for n in nodes:
            assert n.device_slots is not None or n.host_slots is not None
            if n.device_slots is not None and n.parent.parent is not None:
                assert n.parent.device_slots is not None, "device nodes must form a top subtree"
        device = [s for n in nodes if n.device_slots is not None for s in n.device_slots]
        host = [s for n in nodes if n.host_slots is not None for s in n.host_slots]
        assert len(set(device)) == len(device) and len(set(host)) == len(host)


TestTieredTree = TieredTree.TestCase
TestTieredTree.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_a_host_copy_being_loaded_is_not_evicted():
    machine = TieredTree()
    machine.start("write_back")
    a, b = [1, 2, 3, 4], [9] * DEVICE
    machine.compute_and_insert(a)
    machine.tree.evict(DEVICE)  # a: host-only
    m = machine.tree.match(a)
    assert m.host_slots and not m.device_slots
    machine.hicache.lock_host(m.host_node)
    machine.compute_and_insert(b)  # fills the device...
    machine.tree.evict(DEVICE)  # ...and its demotion needs the host's room
    assert machine.tree.match(a).host_slots == m.host_slots, "a host-locked copy was evicted"
    assert machine._kv(m.host_slots, machine.hicache.host) == (a, [-t for t in a])
    machine.hicache.unlock_host(m.host_node)
    assert machine.hicache.evict_host(HOST) == len(a)  # unlocked: evictable again
    machine.books_balance()
