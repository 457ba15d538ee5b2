"""The radix cache against a plain reference model, plus focused unit tests. The machine also pins
prefixes (kvcache/pins.py, on an injected clock): a pinned page is never evicted, a hit restarts its
TTL, and an expired pin leaves its pages evictable again, with the tree's columns (evictable,
protected, pinned, and evictable per namespace) adding up throughout. It gives template credit
(kvcache/template_credit.py), and evicts with tenant fair share on or off: with it on, a tenant at
or below its share loses a leaf only once no tenant over its share has an evictable leaf left."""

from __future__ import annotations

import itertools
from collections import Counter

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixgate.engine.kvcache.eviction import EVICTION_POLICIES, SLRU_PROTECTED_HITS
from radixgate.engine.kvcache.pins import PinTable
from radixgate.engine.kvcache.radix_cache import RadixCache, common_prefix_len
from radixgate.engine.kvcache.template_credit import give_credit
from radixgate.engine.kvcache.tenant_share import TenantShares

# Each policy's key over the reference's per-page books: (last touch, hits, creation, priority, credit).
REF_KEYS = {
    "lru": lambda t, h, c, pr, cr: t,
    "lfu": lambda t, h, c, pr, cr: (h, t),
    "slru": lambda t, h, c, pr, cr: (h >= SLRU_PROTECTED_HITS, t),
    "priority": lambda t, h, c, pr, cr: (pr, t),
    "fifo": lambda t, h, c, pr, cr: c,
    "mru": lambda t, h, c, pr, cr: -t,
    "filo": lambda t, h, c, pr, cr: -c,
    "template": lambda t, h, c, pr, cr: t + cr,
}
# A parent's key is never below its child's: a node evicted mid-way exposes no smaller key.
MONOTONE = {"lru", "lfu", "slru", "priority", "filo", "template"}  # credit: a prefix, so a parent has its child's


def test_common_prefix_len():
    a = list(range(300))
    assert common_prefix_len(a, a) == 300
    assert common_prefix_len(a, a[:10]) == 10
    assert common_prefix_len(a, a[:200] + [-1]) == 200
    assert common_prefix_len([], a) == 0


def _cache(page_size=1):
    freed: list[int] = []
    return RadixCache(page_size, freed.extend), freed


def test_match_insert_split_and_lock():
    cache, freed = _cache()
    assert cache.insert([1, 2, 3, 4], [10, 11, 12, 13]) == 0
    assert cache.insert([1, 2, 5], [20, 21, 22]) == 2  # shares [1, 2]
    slots, node = cache.match_prefix([1, 2, 3, 9])
    assert slots == [10, 11, 12]
    cache.inc_lock_ref(node)
    assert cache.protected_size == 3 and cache.evictable_size == 2  # [4] and [5] stay evictable
    assert cache.evict(100) == 2
    assert sorted(freed) == [13, 22]
    cache.dec_lock_ref(node)
    assert cache.evict(100) == 3 and cache.total_size() == 0


def test_namespaces_never_share():
    cache, _ = _cache()
    cache.insert([1, 2, 3], [1, 2, 3], namespace="tenant-a")
    assert cache.match_prefix([1, 2, 3, 4], namespace="tenant-b")[0] == []
    assert cache.match_prefix([1, 2, 3, 4], namespace="tenant-a")[0] == [1, 2, 3]


def test_reset_namespace_drops_only_that_tenant():
    cache, freed = _cache()
    cache.insert([1, 2, 3], [1, 2, 3], namespace="tenant-a")
    cache.insert([1, 2, 4], [4, 5, 6], namespace="tenant-b")
    _, node = cache.match_prefix([1, 2, 3], namespace="tenant-a")
    cache.inc_lock_ref(node)
    assert not cache.reset_namespace("tenant-a")  # a running request holds it
    assert cache.match_prefix([1, 2, 3], namespace="tenant-a")[0] == [1, 2, 3]
    cache.dec_lock_ref(node)
    assert cache.reset_namespace("tenant-a")
    assert sorted(freed) == [1, 2, 3]
    assert cache.match_prefix([1, 2, 3], namespace="tenant-a")[0] == []
    assert cache.match_prefix([1, 2, 4], namespace="tenant-b")[0] == [4, 5, 6]
    assert cache.evictable_size == cache.total_size() == 3 and cache.num_nodes == 1
    assert cache.evict(100) == 3  # stale heap entries of the dropped namespace are skipped
    assert sorted(freed) == [1, 2, 3, 4, 5, 6]
    assert cache.reset_namespace("never-seen")


def test_page_aligned_keys():
    cache, _ = _cache(page_size=4)
    assert cache.insert(list(range(10)), list(range(100, 110))) == 0
    assert cache.total_size() == 8  # the partial page is not cached
    assert cache.match_prefix(list(range(7)))[0] == list(range(100, 104))


def test_lru_evicts_oldest_leaf_first():
    cache, freed = _cache()
    cache.insert([1, 1], [1, 2])
    cache.insert([2, 2], [3, 4])
    cache.insert([3, 3], [5, 6])
    cache.match_prefix([1, 1])  # [1, 1] becomes most recent
    cache.evict(2)
    assert freed == [3, 4]


class RadixMachine(RuleBasedStateMachine):
    """Reference: a dict from (namespace, page-aligned token prefix) to the slots of its last page,
    and per page what the eviction policy orders by."""

    policy = "lru"

    def __init__(self):
        super().__init__()
        self.page_size = 1
        self.freed: list[int] = []
        self.now = 0.0
        self._new_cache()
        self.pins_ref: dict[tuple, tuple[float, float]] = {}  # (namespace, prefix) -> (ttl, expires)
        self.ref: dict[tuple, int] = {}
        self.ref_time: dict[tuple, int] = {}
        self.ref_hits: Counter = Counter()
        self.ref_created: dict[tuple, int] = {}
        self.ref_priority: dict[tuple, int] = {}
        self.ref_credit: Counter = Counter()
        self.clock = itertools.count(1)
        self.slots = itertools.count()
        self.locked: list[tuple] = []  # (node, namespace, matched prefix)
        self.lock_count: Counter = Counter()

    @rule(page_size=st.sampled_from([1, 2, 4]))
    @precondition(lambda self: not self.ref and not self.locked)
    def choose_page_size(self, page_size):
        self.page_size = page_size
        self._new_cache()

    def _new_cache(self):
        self.cache = RadixCache(self.page_size, self.freed.extend, self.policy)
        self.pins = PinTable(self.cache, 10**9, clock=lambda: self.now)

    def _is_pinned(self, p) -> bool:
        return any(q[0] == p[0] and q[1][: len(p[1])] == p[1] for q in self.pins_ref)

    def _ref_match(self, ns, key) -> int:
        n, ps = 0, self.page_size
        while n + ps <= len(key) and (ns, tuple(key[: n + ps])) in self.ref:
            n += ps
        return n

    def _pages(self, n):
        return range(self.page_size, n + 1, self.page_size)

    def _touch(self, ns, key, n, priority=0, hit=False):
        now = next(self.clock)
        for j in self._pages(n):
            p = (ns, tuple(key[:j]))
            self.ref_time[p] = now
            self.ref_hits[p] += hit
            self.ref_priority[p] = max(self.ref_priority[p], priority)
        return now

    def _key(self, p):
        return REF_KEYS[self.policy](
            self.ref_time[p], self.ref_hits[p], self.ref_created[p], self.ref_priority[p], self.ref_credit[p]
        )

    def _evictable_leaves(self, contents):
        return [
            p
            for p in contents
            if self.lock_count[p] == 0
            and not self._is_pinned(p)
            and not any(q[0] == p[0] and len(q[1]) > len(p[1]) and q[1][: len(p[1])] == p[1] for q in contents)
        ]

    keys = st.lists(st.integers(0, 3), min_size=1, max_size=12)
    namespaces = st.sampled_from([None, "a"])

    priorities = st.integers(0, 2)

    @rule(ns=namespaces, key=keys, resume=st.booleans(), priority=priorities)
    def insert(self, ns, key, resume, priority):
        aligned = len(key) - len(key) % self.page_size
        slots = [next(self.slots) for _ in key]
        expected = self._ref_match(ns, key)
        start = None
        if resume:  # resume the walk at a matched node, as the engine does for a request's own prefix
            m = self.cache.match(key, ns, priority=priority)
            start = m.node
            self._touch(ns, key, len(m.device_slots), priority, hit=True)
        assert self.cache.insert(key, slots, ns, start=start, priority=priority) == expected
        for j in self._pages(aligned):
            if j > expected:
                p = (ns, tuple(key[:j]))
                self.ref[p] = tuple(slots[j - self.page_size : j])
                self.ref_hits[p], self.ref_priority[p], self.ref_credit[p] = 0, 0, 0
        now = self._touch(ns, key, aligned, priority)
        for j in self._pages(aligned):
            if j > expected:
                self.ref_created[(ns, tuple(key[:j]))] = now

    @rule(ns=namespaces, key=keys, lock=st.booleans(), priority=priorities)
    def match(self, ns, key, lock, priority):
        m = self.cache.match(key, ns, priority=priority)
        slots, node = m.device_slots, m.node
        n = self._ref_match(ns, key)
        assert slots == [s for j in self._pages(n) for s in self.ref[(ns, tuple(key[:j]))]]
        self._touch(ns, key, n, priority, hit=True)
        self.pins.touch(node)  # a hit restarts the TTL of every pin on its path, as the engine's match does
        for q, (ttl, _) in list(self.pins_ref.items()):
            if q[0] == ns and len(q[1]) <= n and tuple(key[: len(q[1])]) == q[1]:
                self.pins_ref[q] = (ttl, self.now + ttl)
        if lock and n:
            self.cache.inc_lock_ref(node)
            self.locked.append((node, ns, tuple(key[:n])))
            for j in self._pages(n):
                self.lock_count[(ns, tuple(key[:j]))] += 1

    @rule(data=st.data())
    @precondition(lambda self: self.locked)
    def unlock(self, data):
        node, ns, prefix = self.locked.pop(data.draw(st.integers(0, len(self.locked) - 1)))
        self.cache.dec_lock_ref(node)
        for j in self._pages(len(prefix)):
            self.lock_count[(ns, prefix[:j])] -= 1

    @rule(ns=namespaces, key=keys, ttl=st.sampled_from([1.0, 5.0]))
    def pin(self, ns, key, ttl):
        m = self.cache.match(key, ns, count_hit=False)
        n = self._ref_match(ns, key)
        self._touch(ns, key, n)
        if n == 0:
            return
        assert self.pins.pin(m.node, ttl, ns) is None
        q = (ns, tuple(key[:n]))
        old_ttl, old_expires = self.pins_ref.get(q, (0.0, 0.0))
        self.pins_ref[q] = (max(old_ttl, ttl), max(old_expires, self.now + ttl))

    @rule(dt=st.sampled_from([0.5, 2.0, 6.0]))
    def tick(self, dt):
        self.now += dt
        self.pins.expire()
        self.pins_ref = {q: v for q, v in self.pins_ref.items() if v[1] > self.now}

    @rule(ns=namespaces, key=keys, requests=st.integers(1, 20))
    def credit(self, ns, key, requests):
        now = next(self.clock)  # give_credit reads the tree's clock, which moves one tick
        ticks = requests * max(1, now // 3)
        n = self._ref_match(ns, key)
        assert give_credit(self.cache, key, ns, requests, num_requests=3) == n
        for j in self._pages(n):
            p = (ns, tuple(key[:j]))
            self.ref_credit[p] = max(self.ref_credit[p], ticks)

    def _held(self, contents):
        return Counter(p[0] for p in contents)

    @rule(num_tokens=st.integers(1, 6), fair=st.booleans(), capacity=st.integers(2, 24), weight=st.sampled_from([1, 3]))
    def evict(self, num_tokens, fair, capacity, weight):
        """With `fair`, tenants None and "a" (weight `weight`) share `capacity` tokens: leaves of a
        tenant over its share go first, another tenant's only once none over its share has any left."""
        before = dict(self.ref)
        evictable = sum(1 for p in before if self.lock_count[p] == 0 and not self._is_pinned(p))
        leaves_before = set(self._evictable_leaves(before))
        n_freed_before = len(self.freed)
        ps, over = self.page_size, set()
        if fair:
            shares = TenantShares(capacity, clock=lambda: self.now)
            shares.weights["a"] = weight
            shares.seen(None)
            shares.seen("a")
            share = shares.fair_tokens()
            over = {ns for ns, n in self._held(before).items() if ps * n > share[ns]}
            over = {ns for ns in over if any(p[0] == ns for p in leaves_before)}
            self.cache.fair = shares
        freed = self.cache.evict(num_tokens)
        self.cache.fair = None
        after = dict(self._real_contents())
        removed = set(before) - set(after)
        assert set(after) <= set(before)
        assert freed == ps * len(removed) >= min(num_tokens, ps * evictable)
        assert all(self.lock_count[p] == 0 for p in removed), "evicted a locked prefix"
        assert not any(self._is_pinned(p) for p in removed), "evicted a pinned prefix"
        assert sorted(self.freed[n_freed_before:]) == sorted(s for p in removed for s in before[p])
        if over and any(p[0] not in over for p in removed):  # fair share's rule: the others waited
            held, leaves = self._held(after), self._evictable_leaves(after)
            for ns in over:
                assert ps * held[ns] <= share[ns] or not any(p[0] == ns for p in leaves), "not fair"
        if over:
            self.ref = after
            return  # policy order holds only inside the set of tenants over their share
        # Every leaf left was in the heap while each removed page was taken: none has a smaller key.
        # Under a monotone policy that also holds for leaves the eviction itself exposed.
        leaves = self._evictable_leaves(after)
        if self.policy not in MONOTONE:
            leaves = [p for p in leaves if p in leaves_before]
        if removed and leaves:
            worst = max(self._key(p) for p in removed)
            assert worst <= min(self._key(p) for p in leaves), f"not {self.policy}"
        self.ref = after

    def _real_contents(self):
        for ns, root in self.cache.roots.items():
            stack = [(child, []) for child in root.children.values()]
            while stack:
                node, prefix = stack.pop()
                for i in range(self.page_size, len(node.key) + 1, self.page_size):
                    yield (ns, tuple(prefix) + node.key[:i]), tuple(node.device_slots[i - self.page_size : i])
                stack.extend((c, prefix + list(node.key)) for c in node.children.values())

    @invariant()
    def accounting(self):
        total = self.cache.total_size()
        assert total == self.page_size * len(self.ref)
        assert dict(self._real_contents()) == self.ref
        cache, ps = self.cache, self.page_size
        assert cache.evictable_size + cache.protected_size + cache.pinned_size == total
        assert cache.protected_size == ps * sum(1 for p in self.ref if self.lock_count[p] > 0)
        pinned = [p for p in self.ref if self._is_pinned(p)]
        assert cache.pinned_size == ps * sum(1 for p in pinned if self.lock_count[p] == 0)
        assert self.pins.num_pinned_tokens == ps * len(pinned) and len(self.pins) == len(self.pins_ref)
        assert len(self.freed) == len(set(self.freed)), "a slot was freed twice"
        free_pages = Counter(p[0] for p in self.ref if self.lock_count[p] == 0 and not self._is_pinned(p))
        assert +cache.evictable_by_namespace == Counter({ns: ps * n for ns, n in free_pages.items()})


TestRadixMachine = RadixMachine.TestCase
TestRadixMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)

# The same machine under every other policy, fewer examples each (the books do not depend on it).
for _policy in EVICTION_POLICIES:
    if _policy != RadixMachine.policy:
        _case = type(f"{_policy.capitalize()}Machine", (RadixMachine,), {"policy": _policy}).TestCase
        _case.settings = settings(max_examples=30, stateful_step_count=40, deadline=None)
        globals()[f"TestRadixMachine{_policy.capitalize()}"] = _case
del _case  # unittest collects every TestCase bound in the module
