"""Credit for a returning template's static prefix: what the `template` eviction policy keeps.

The gateway knows each template's measured reuse; for a request of a template whose requests have
come back it sends `SamplingParams.cache_credit = (prefix tokens, requests)`: keep the first `prefix
tokens` of the prompt (its static part: system prompt, tools, documents) as if they had been used
`requests` requests later than they were. The tree's clock moves a few ticks per request (each
match and insert is one), so the cache manager turns requests into ticks with the tree's own rate so
far (ticks / requests matched). Each node of the prefix keeps the highest credit any request gave
it; under `template` its eviction key is `last access + credit` (`eviction.py`), under every other
policy the credit is kept and unused. Giving credit changes no token column and locks nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from .tree_node import common_prefix_len

if TYPE_CHECKING:
    from .radix_cache import RadixCache

__all__ = ["give_credit"]


def give_credit(cache: RadixCache, key: Sequence[int], namespace: Hashable, requests: int, num_requests: int) -> int:
    """Raises the credit of the nodes holding `key` (cut at its page-aligned end, so a node reaching
    past it is split and only the prefix's part is credited) to `requests` requests' worth of tree
    ticks; `num_requests` is how many requests the tree has served. Touches no access time or hit
    count. Returns the tokens credited (the part of `key` on the device)."""
    key = tuple(key)
    now = next(cache._clock)
    ticks = requests * max(1, now // max(1, num_requests))
    node, pos, end = cache.root(namespace), 0, cache._page_align(len(key))
    while pos < end:
        child = node.children.get(cache._child_key(key, pos))
        if child is None or child.device_slots is None:
            break
        n = cache._page_align(common_prefix_len(child.key, key[pos:end]))
        if n == 0:
            break
        if n < len(child.key):
            child = cache._split(child, n)
        if ticks > child.credit:
            child.credit = ticks
            if cache._is_evictable_leaf(child):
                cache._push(child)  # its key changed: the old entry is stale
        node, pos = child, pos + n
    return pos
