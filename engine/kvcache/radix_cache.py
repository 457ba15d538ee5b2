"""Radix tree over token ids whose values are KV slots: any shared prefix is stored once.

Contract
- `match_prefix(key, namespace)` returns the slots of the longest cached prefix of `key` (page-aligned)
  and the node ending it; they stay valid only while that node is locked (`inc_lock_ref`).
- `insert(key, slots, namespace)` stores `key -> slots` and returns how many leading tokens were
  already cached; the tree owns the slots past that point (the caller frees the duplicates before it).
- `inc_lock_ref(node)` / `dec_lock_ref(node)` protect / release a node and all its ancestors.
- `evict(num_tokens, allocating)` frees unlocked, unpinned leaves in the eviction policy's order (`eviction.py`),
  tenants above their fair share first when `fair` is set (`tenant_share.py`; `allocating`: for whom).
- Namespaces (a tenant's cache salt) have separate roots and never share nodes; `reset_namespace(ns)`
  drops one of them. `tokens_by_namespace` counts each one's device tokens.

Tiers (HiCache, `hicache/tier_controller.py`): `device_slots` / `host_slots` are a node's slots in each
tier, or None. Device nodes form a top subtree; `match` reports the device part and the host-only part
after it; `insert` over a host-only node adopts the given slots. With a `demote` hook, device eviction
keeps a node the hook copied to the host; otherwise the node leaves, with the host-only nodes below it.

Token accounting (every cached token is in exactly one column; device nodes only, except host_size):

| column          | what it holds                                   | changes when                      |
|-----------------|-------------------------------------------------|-----------------------------------|
| evictable_size  | tokens in nodes with lock_ref == pin_ref == 0   | insert (+), evict (-), unlock (+) |
|                 | (and per namespace: evictable_by_namespace)     |                                   |
| protected_size  | tokens in nodes with lock_ref > 0               | lock (+, from the others), unlock |
| pinned_size     | tokens in nodes with lock_ref == 0 < pin_ref    | pin / unpin (`pins.py`), lock     |
| host_size       | tokens with a host copy (a separate pool)       | host copy set (+) or dropped (-)  |

With the allocator's free tokens and the running requests' own tokens these add up to the pool.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from .eviction import DEFAULT_EVICTION_POLICY, eviction_key
from .flush import drop_all, drop_namespace
from .tree_node import PrefixMatch, TreeNode, common_prefix_len

__all__ = ["RadixCache", "TreeNode", "PrefixMatch", "common_prefix_len"]


class RadixCache:
    def __init__(
        self,
        page_size: int,
        free_slots: Callable[[Sequence[int]], None],
        eviction_policy: str = DEFAULT_EVICTION_POLICY,
    ):
        self.page_size = page_size
        self.eviction_policy = eviction_policy
        self._key = eviction_key(eviction_policy)
        self._free_slots = free_slots
        self.demote: Callable[[TreeNode], bool] | None = None  # HiCache: True keeps an evicted node on host
        self.free_host_slots: Callable[[Sequence[int]], None] | None = None
        # KV events (kv_events.KVEventRecorder): told which nodes enter and leave each tier
        self.events: Any = None
        self.pins: Any = None  # pins.PinTable, when TTL pins are on
        self.fair: Any = None  # tenant_share.TenantShares, when eviction keeps tenants' fair shares
        self.tokens_by_namespace: Counter[Hashable] = Counter()  # device tokens per namespace
        self.evictable_by_namespace: Counter[Hashable] = Counter()  # evictable_size per namespace
        self.roots: dict[Hashable, TreeNode] = {}
        self.evictable_size = self.protected_size = self.pinned_size = self.host_size = self.num_nodes = 0
        self._clock = itertools.count(1)
        self._heap: list[tuple[Any, int, TreeNode]] = []  # (policy key, seq, leaf), lazily invalidated
        self._seq = itertools.count()

    # ---- lookup -------------------------------------------------------------------------------
    def _child_key(self, key: tuple[int, ...], start: int = 0) -> Hashable:
        return key[start] if self.page_size == 1 else key[start : start + self.page_size]

    def root(self, namespace: Hashable = None) -> TreeNode:
        node = self.roots.get(namespace)
        if node is None:
            node = self.roots[namespace] = TreeNode((), (), None)
            node.lock_ref = 1  # a root is never evicted
            node.namespace = namespace
        return node

    def _page_align(self, n: int) -> int:
        return n - n % self.page_size

    def match_prefix(
        self, key: Sequence[int], namespace: Hashable = None, count_hit: bool = True
    ) -> tuple[list[int], TreeNode]:
        """The device part of `match`: (slots, the node ending them)."""
        m = self.match(key, namespace, count_hit=count_hit)
        return m.device_slots, m.node

    def match(
        self, key: Sequence[int], namespace: Hashable = None, priority: int = 0, count_hit: bool = True
    ) -> PrefixMatch:
        """`count_hit=False` for a lookup that is no request's hit (re-finding what was just
        inserted): lfu and slru count only real hits. `priority` raises the matched nodes' own."""
        key = tuple(key)
        node = self.root(namespace)
        now = next(self._clock)
        node.last_access = now
        m = PrefixMatch([], node)
        pos, end = 0, self._page_align(len(key))
        while pos < end:
            child = node.children.get(self._child_key(key, pos))
            if child is None:
                break
            n = self._page_align(common_prefix_len(child.key, key[pos : pos + len(child.key)]))
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            child.hit_count += count_hit
            if priority > child.priority:
                child.priority = priority
            if child.device_slots is not None:
                m.device_slots.extend(child.device_slots)
                m.node = child
            else:  # off the device, so on the host
                assert child.host_slots is not None
                m.host_slots.extend(child.host_slots)
                m.host_node = child
            node, pos = child, pos + n
        if self._is_evictable_leaf(m.node):
            self._push(m.node)
        return m

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut `child` after n tokens; returns the new upper node (which keeps child's lock count)."""
        upper_slots = None if child.device_slots is None else child.device_slots[:n]
        parent = child.parent
        assert parent is not None, "a root is never split"
        upper = TreeNode(child.key[:n], upper_slots, parent)  # depth: parent's + n
        upper.lock_ref, upper.last_access, upper.hit_count = child.lock_ref, child.last_access, child.hit_count
        upper.created, upper.priority, upper.pin_ref = child.created, child.priority, child.pin_ref
        upper.credit = child.credit
        upper.host_lock_ref = child.host_lock_ref
        parent.children[self._child_key(upper.key)] = upper
        child.key, child.parent = child.key[n:], upper
        if child.device_slots is not None:
            child.device_slots = child.device_slots[n:]
        if child.host_slots is not None:
            upper.host_slots, child.host_slots = child.host_slots[:n], child.host_slots[n:]
        upper.children[self._child_key(child.key)] = child
        self.num_nodes += 1
        return upper

    # ---- insert -------------------------------------------------------------------------------
    def insert(
        self,
        key: Sequence[int],
        slots: Sequence[int],
        namespace: Hashable = None,
        start: TreeNode | None = None,
        priority: int = 0,
    ) -> int:
        """Returns the number of leading tokens that were already cached on the device (page-aligned);
        the tree owns every slot past that point (a host-only node on the way adopts its slots).

        `start`, when given, is a node known to end a prefix of `key` (one a request matched and
        still holds locked): the walk resumes there instead of comparing that prefix again."""
        key = tuple(key)
        end = self._page_align(len(key))
        assert len(slots) >= end, "every inserted token needs a slot"
        now = next(self._clock)
        if start is not None and not start.is_evicted and start.depth <= end:
            node, pos = start, start.depth
            assert key[pos - len(node.key[-1:]) : pos] == node.key[-1:], "start does not end a prefix of key"
        else:
            node, pos = self.root(namespace), 0
        existing = pos
        while pos < end:
            child = node.children.get(self._child_key(key, pos))
            if child is None:
                new = TreeNode(key[pos:end], tuple(slots[pos:end]), node)
                new.last_access = new.created = now
                new.priority = priority
                node.children[self._child_key(new.key)] = new
                self.num_nodes += 1
                if self.events is not None:
                    self.events.stored(new)
                self.add_evictable(new, end - pos)
                self.tokens_by_namespace[new.namespace] += end - pos
                self._push(new)
                return existing
            n = self._page_align(common_prefix_len(child.key, key[pos : pos + len(child.key)]))
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            if priority > child.priority:
                child.priority = priority
            if child.device_slots is None:
                assert child.lock_ref == 0, "a node off the device cannot be locked"
                child.device_slots = tuple(slots[pos : pos + n])
                self.add_evictable(child, n)
                self.tokens_by_namespace[child.namespace] += n
                if self.events is not None:
                    self.events.stored(child)
            else:
                assert existing == pos, "a device node below a host-only node"
                existing = pos + n
            node, pos = child, pos + n
        if self._is_evictable_leaf(node):
            self._push(node)
        return existing

    # ---- locking ------------------------------------------------------------------------------
    def inc_lock_ref(self, node: TreeNode) -> None:
        while node.parent is not None:
            if node.lock_ref == 0:
                self._move_unlocked(node, -len(node.key))
                self.protected_size += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        if node.lock_ref == 1 and self._is_device_leaf(node):
            self._push(node)
        while node.parent is not None:
            assert node.lock_ref > 0, "dec_lock_ref on an unlocked node"
            if node.lock_ref == 1:
                self._move_unlocked(node, len(node.key))
                self.protected_size -= len(node.key)
            node.lock_ref -= 1
            node = node.parent

    def _move_unlocked(self, node: TreeNode, n: int) -> None:
        """Adds n tokens to the column an unlocked node counts in: pinned or evictable."""
        if node.pin_ref:
            self.pinned_size += n
        else:
            self.add_evictable(node, n)

    def add_evictable(self, node: TreeNode, n: int) -> None:
        """n more (or fewer) evictable tokens, in `node`'s namespace: the fair pass skips a tenant
        with none (a tenant with evictable tokens has an evictable leaf: what is unlocked and
        unpinned has no locked or pinned node below it)."""
        self.evictable_size += n
        self.evictable_by_namespace[node.namespace] += n

    # ---- eviction -----------------------------------------------------------------------------
    def _push(self, node: TreeNode) -> None:
        heapq.heappush(self._heap, (self._key(node), next(self._seq), node))
        if len(self._heap) > 4 * self.num_nodes + 64:
            self._compact_heap()

    def _compact_heap(self) -> None:
        self._heap = list({id(e[2]): e for e in self._heap if self._is_live(e)}.values())
        heapq.heapify(self._heap)

    def _is_device_leaf(self, node: TreeNode) -> bool:
        """On the device with no child on the device (device nodes form a top subtree). Without a
        host tier every node is on the device, so this is an ordinary leaf test."""
        if node.device_slots is None or node.parent is None or node.is_evicted:
            return False
        if self.demote is None:
            return not node.children
        return all(c.device_slots is None for c in node.children.values())

    def _is_evictable_leaf(self, node: TreeNode) -> bool:
        return node.lock_ref == 0 and node.pin_ref == 0 and self._is_device_leaf(node)

    def evict(self, num_tokens: int, allocating: Mapping[Hashable, int] | None = None) -> int:
        """Frees evictable device leaves, smallest policy key first, until at least num_tokens are
        freed; returns tokens freed (a leaf the `demote` hook copied to the host stays, host-only).
        `allocating`: namespace -> tokens of the requests the room is for, when known."""
        if self.pins is not None:
            self.pins.expire()  # an expired pin is an ordinary node again before anything is taken
        if self.fair is not None:
            return self.fair.evict(self, num_tokens, allocating)  # tenants above their share first
        freed = 0
        while freed < num_tokens and self._heap:
            entry = heapq.heappop(self._heap)
            if self._is_live(entry):
                freed += self._evict_leaf(entry[2])
        return freed

    def _is_live(self, entry: tuple[Any, int, TreeNode]) -> bool:
        """False for a stale heap entry: its node was touched, locked, pinned, split or grew children."""
        return self._is_evictable_leaf(entry[2]) and entry[0] == self._key(entry[2])

    def _evict_leaf(self, node: TreeNode) -> int:
        """Takes one evictable leaf off the device (keeping it host-only if `demote` copied it)."""
        freed = len(node.key)
        self.add_evictable(node, -freed)
        self.tokens_by_namespace[node.namespace] -= len(node.key)
        keep = self.demote is not None and self.demote(node)
        if self.events is not None:
            self.events.removed(node)
        assert node.device_slots is not None and node.parent is not None  # a device leaf, not a root
        self._free_slots(node.device_slots)
        node.device_slots = None
        if not keep:
            self.remove_subtree(node)
        parent = node.parent
        if self._is_evictable_leaf(parent):
            self._push(parent)
        return freed

    def remove_subtree(self, node: TreeNode) -> None:
        """Takes an off-device node out of the tree, with the host copies below it."""
        assert node.parent is not None, "a root is never removed"
        del node.parent.children[self._child_key(node.key)]
        stack = [node]
        while stack:
            n = stack.pop()
            assert n.device_slots is None and n.host_lock_ref == 0, "removing a node on the device or in use"
            stack.extend(n.children.values())
            if n.host_slots is not None:
                self.drop_host_slots(n)
            n.is_evicted = True
            self.num_nodes -= 1

    # ---- host copies (HiCache) ----------------------------------------------------------------
    def set_host_slots(self, node: TreeNode, host_slots: Sequence[int]) -> None:
        assert node.host_slots is None and len(host_slots) == len(node.key)
        node.host_slots = tuple(host_slots)
        self.host_size += len(host_slots)
        if self.events is not None:
            self.events.stored(node, "CPU")

    def drop_host_slots(self, node: TreeNode, announce: bool = True) -> None:
        if announce and self.events is not None:
            self.events.removed(node, "CPU")
        assert self.free_host_slots is not None and node.host_slots is not None
        self.free_host_slots(node.host_slots)
        self.host_size -= len(node.host_slots)
        node.host_slots = None

    @staticmethod
    def path_to(node: TreeNode) -> list[TreeNode]:
        """The nodes from below the root down to `node`."""
        path = []
        while node.parent is not None:
            path.append(node)
            node = node.parent
        return path[::-1]

    @staticmethod
    def namespace_of(node: TreeNode) -> Hashable:
        return node.namespace  # every node carries its root's

    def reset(self) -> None:
        """Drops every node, freeing their slots. Only valid when no node is locked (`flush.py`)."""
        drop_all(self)

    def reset_namespace(self, namespace: Hashable) -> bool:
        """Drops one namespace's nodes; False, nothing changed, while a request holds one (`flush.py`)."""
        return drop_namespace(self, namespace)

    # ---- introspection ------------------------------------------------------------------------
    def iter_nodes(self):
        for root in self.roots.values():
            stack = list(root.children.values())
            while stack:
                node = stack.pop()
                stack.extend(node.children.values())
                yield node

    def total_size(self) -> int:
        """Tokens on the device."""
        return sum(len(n.key) for n in self.iter_nodes() if n.device_slots is not None)
