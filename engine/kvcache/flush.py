"""Dropping cached prefixes on purpose (`/flush_cache`): the whole tree, or one tenant's namespace.
Both free every slot they drop and leave the tree's columns and heap as an empty tree's (or as if
the namespace had never been used); eviction, which takes leaves one by one, is in `radix_cache.py`."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .radix_cache import RadixCache

__all__ = ["drop_all", "drop_namespace"]


def drop_all(cache: RadixCache) -> None:
    """Drops every node, freeing their slots. Only valid when no node is locked."""
    assert cache.protected_size == 0, "reset while requests hold cached prefixes"
    for root in cache.roots.values():
        stack = list(root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node.device_slots is not None:
                cache._free_slots(node.device_slots)
            if node.host_slots is not None:
                cache.drop_host_slots(node, announce=False)
            node.is_evicted = True
    if cache.events is not None:
        cache.events.cleared()
    if cache.pins is not None:
        cache.pins.clear()
    cache.roots.clear()
    cache._heap.clear()
    cache.evictable_size = cache.protected_size = cache.pinned_size = cache.num_nodes = 0
    cache.tokens_by_namespace.clear()
    cache.evictable_by_namespace.clear()


def drop_namespace(cache: RadixCache, namespace: Hashable) -> bool:
    """Drops every node of one namespace (a tenant's salt), freeing their slots; other namespaces
    keep theirs. Refused (False, nothing changed) while a request holds a node of it."""
    root = cache.roots.get(namespace)
    if root is None:
        return True
    nodes = []
    stack = list(root.children.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        nodes.append(node)
    if any(n.lock_ref or n.host_lock_ref for n in nodes):
        return False
    for node in nodes:
        if node.device_slots is not None:
            if cache.events is not None:
                cache.events.removed(node)
            cache._free_slots(node.device_slots)
            cache._move_unlocked(node, -len(node.key))
        if node.host_slots is not None:
            cache.drop_host_slots(node)
        node.is_evicted = True  # its heap entries are now stale
    cache.num_nodes -= len(nodes)
    if cache.pins is not None:
        cache.pins.clear(namespace, everything=False)
    cache.tokens_by_namespace.pop(namespace, None)
    cache.evictable_by_namespace.pop(namespace, None)
    del cache.roots[namespace]
    return True
