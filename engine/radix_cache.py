"""Radix tree over token ids whose values are KV slots: any shared prefix is stored once.

Contract
- `match_prefix(key, namespace)` returns the slots of the longest cached prefix of `key` (page-aligned)
  and the node that ends it. The slots stay valid only while that node is locked (`inc_lock_ref`):
  an unlocked node may be evicted by the next `evict` call.
- `insert(key, slots, namespace)` stores `key -> slots` and returns how many leading tokens were
  already cached. The tree takes ownership of slots past that point; slots of the already-cached
  part stay the caller's to free (they duplicate KV the tree already holds).
- `inc_lock_ref(node)` / `dec_lock_ref(node)` protect / release a node and all its ancestors.
- `evict(num_tokens)` frees least-recently-used unlocked leaves until `num_tokens` are freed or
  nothing evictable remains.
- Namespaces (a tenant's cache salt, an extra key) have separate roots: they never share nodes.

Token accounting (every cached token is in exactly one column):

| column          | what it holds                                   | changes when                      |
|-----------------|-------------------------------------------------|-----------------------------------|
| evictable_size  | tokens in nodes with lock_ref == 0              | insert (+), evict (-), unlock (+) |
| protected_size  | tokens in nodes with lock_ref > 0               | lock (+, from evictable), unlock  |

With the allocator's free tokens and the running requests' own tokens these add up to the pool.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Callable, Hashable, Sequence

_COMPARE_BLOCK = 64


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists; compares in blocks so long matches stay in C."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while i < n and a[i:i + _COMPARE_BLOCK] == b[i:i + _COMPARE_BLOCK]:
        i += _COMPARE_BLOCK
    while i < n and a[i] == b[i]:
        i += 1
    return i


class TreeNode:
    __slots__ = ("key", "value", "children", "parent", "depth", "lock_ref", "last_access", "hit_count",
                 "is_evicted")

    def __init__(self, key: tuple[int, ...], value: tuple[int, ...], parent: "TreeNode | None"):
        # Tuples, not lists: the garbage collector stops tracking tuples of ints, so a large tree
        # costs nothing at collection time (lists of ints were traversed element by element).
        self.key = key                  # token ids on the edge from parent to this node
        self.value = value              # KV slots of those tokens, same length
        self.children: dict[Hashable, TreeNode] = {}
        self.parent = parent
        self.depth = (parent.depth if parent is not None else 0) + len(key)   # tokens from the root
        self.lock_ref = 0
        self.last_access = 0
        self.hit_count = 0
        self.is_evicted = False

    @property
    def is_leaf(self) -> bool:
        return not self.children


class RadixCache:
    def __init__(self, page_size: int, free_slots: Callable[[Sequence[int]], None]):
        self.page_size = page_size
        self._free_slots = free_slots
        self.roots: dict[Hashable, TreeNode] = {}
        self.evictable_size = 0
        self.protected_size = 0
        self.num_nodes = 0
        self._clock = itertools.count(1)
        self._heap: list[tuple[int, int, TreeNode]] = []   # (last_access, seq, leaf), lazily invalidated
        self._seq = itertools.count()

    # ---- lookup -------------------------------------------------------------------------------
    def _child_key(self, key: tuple[int, ...], start: int = 0) -> Hashable:
        return key[start] if self.page_size == 1 else key[start:start + self.page_size]

    def root(self, namespace: Hashable = None) -> TreeNode:
        node = self.roots.get(namespace)
        if node is None:
            node = self.roots[namespace] = TreeNode((), (), None)
            node.lock_ref = 1   # a root is never evicted
        return node

    def _page_align(self, n: int) -> int:
        return n - n % self.page_size

    def match_prefix(self, key: Sequence[int], namespace: Hashable = None) -> tuple[list[int], TreeNode]:
        key = tuple(key)
        node = self.root(namespace)
        now = next(self._clock)
        node.last_access = now
        slots: list[int] = []
        pos, end = 0, self._page_align(len(key))
        while pos < end:
            child = node.children.get(self._child_key(key, pos))
            if child is None:
                break
            n = self._page_align(common_prefix_len(child.key, key[pos:pos + len(child.key)]))
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            child.hit_count += 1
            slots.extend(child.value)
            node, pos = child, pos + n
        if node.is_leaf and node.lock_ref == 0:
            self._push(node)
        return slots, node

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut `child` after n tokens; returns the new upper node (which keeps child's lock count)."""
        upper = TreeNode(child.key[:n], child.value[:n], child.parent)   # depth: parent's + n
        upper.lock_ref, upper.last_access, upper.hit_count = child.lock_ref, child.last_access, child.hit_count
        upper.parent.children[self._child_key(upper.key)] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        upper.children[self._child_key(child.key)] = child
        self.num_nodes += 1
        return upper

    # ---- insert -------------------------------------------------------------------------------
    def insert(self, key: Sequence[int], slots: Sequence[int], namespace: Hashable = None,
               start: TreeNode | None = None) -> int:
        """Returns the number of leading tokens that were already cached (page-aligned).

        `start`, when given, is a node known to end a prefix of `key` (one a request matched and
        still holds locked): the walk resumes there instead of comparing that prefix again."""
        key = tuple(key)
        end = self._page_align(len(key))
        assert len(slots) >= end, "every inserted token needs a slot"
        now = next(self._clock)
        if start is not None and not start.is_evicted and start.depth <= end:
            node, pos = start, start.depth
            assert key[pos - len(node.key[-1:]):pos] == node.key[-1:], "start does not end a prefix of key"
        else:
            node, pos = self.root(namespace), 0
        while pos < end:
            child = node.children.get(self._child_key(key, pos))
            if child is None:
                new = TreeNode(key[pos:end], tuple(slots[pos:end]), node)
                new.last_access = now
                node.children[self._child_key(new.key)] = new
                self.num_nodes += 1
                self.evictable_size += end - pos
                self._push(new)
                return pos
            n = self._page_align(common_prefix_len(child.key, key[pos:pos + len(child.key)]))
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            node, pos = child, pos + n
        if node.is_leaf and node.lock_ref == 0:
            self._push(node)
        return pos

    # ---- locking ------------------------------------------------------------------------------
    def inc_lock_ref(self, node: TreeNode) -> None:
        while node.parent is not None:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        if node.is_leaf and node.parent is not None and node.lock_ref == 1:
            self._push(node)
        while node.parent is not None:
            assert node.lock_ref > 0, "dec_lock_ref on an unlocked node"
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node.lock_ref -= 1
            node = node.parent

    # ---- eviction -----------------------------------------------------------------------------
    def _push(self, node: TreeNode) -> None:
        heapq.heappush(self._heap, (node.last_access, next(self._seq), node))
        if len(self._heap) > 4 * self.num_nodes + 64:
            self._compact_heap()

    def _compact_heap(self) -> None:
        live = {}
        for entry in self._heap:
            node = entry[2]
            if self._is_evictable_leaf(node) and entry[0] == node.last_access:
                live[id(node)] = entry
        self._heap = list(live.values())
        heapq.heapify(self._heap)

    @staticmethod
    def _is_evictable_leaf(node: TreeNode) -> bool:
        return not node.is_evicted and node.is_leaf and node.lock_ref == 0 and node.parent is not None

    def evict(self, num_tokens: int) -> int:
        """Frees LRU unlocked leaves until at least num_tokens are freed; returns tokens freed."""
        freed = 0
        while freed < num_tokens and self._heap:
            access, _, node = heapq.heappop(self._heap)
            if not self._is_evictable_leaf(node) or access != node.last_access:
                continue   # stale entry: the node was touched, locked, split or grew children
            self._free_slots(node.value)
            freed += len(node.key)
            self.evictable_size -= len(node.key)
            self._remove(node)
            parent = node.parent
            if parent.parent is not None and self._is_evictable_leaf(parent):
                self._push(parent)
        return freed

    def _remove(self, node: TreeNode) -> None:
        del node.parent.children[self._child_key(node.key)]
        node.is_evicted = True
        self.num_nodes -= 1

    def reset(self) -> None:
        """Drops every node, freeing their slots. Only valid when no node is locked."""
        assert self.protected_size == 0, "reset while requests hold cached prefixes"
        for root in self.roots.values():
            stack = list(root.children.values())
            while stack:
                node = stack.pop()
                stack.extend(node.children.values())
                self._free_slots(node.value)
        self.roots.clear()
        self._heap.clear()
        self.evictable_size = self.protected_size = self.num_nodes = 0

    # ---- introspection ------------------------------------------------------------------------
    def iter_nodes(self):
        for root in self.roots.values():
            stack = list(root.children.values())
            while stack:
                node = stack.pop()
                stack.extend(node.children.values())
                yield node

    def total_size(self) -> int:
        return sum(len(n.key) for n in self.iter_nodes())
