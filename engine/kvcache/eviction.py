"""Which unlocked device leaf the radix cache evicts first: one priority key per policy (SGLang's
`--radix-eviction-policy` names). The smallest key leaves first.

| policy   | key (smallest evicted first)               | keeps                                   |
|----------|--------------------------------------------|-----------------------------------------|
| lru      | last access                                | recently used prefixes (the default)    |
| lfu      | (hits, last access)                        | often matched prefixes                  |
| slru     | (hits >= 2, last access)                   | prefixes hit twice, over one-off ones   |
| priority | (request priority, last access)            | prefixes of high-priority requests      |
| fifo     | creation                                   | the newest inserts                      |
| mru      | -last access                               | the oldest prefixes (cyclic scans)      |
| filo     | -creation                                  | the oldest inserts                      |
| template | last access + credit                       | static prefixes of returning templates  |

A node's hits count the matches that reached it; its priority is the highest priority of the
requests that inserted or matched it; its credit is what the gateway gave a returning template's
static prefix (`template_credit.py`), so under `template` such a node looks that many tree-clock
ticks younger than it is, and every other node is ordered as under lru.

How the tree stays incremental: it pushes (key, seq, node) on a heap whenever a node becomes an
evictable leaf or its key changes while it is one (every key changes only when the node is touched
or credited, and such a leaf is pushed), and an entry whose key is no longer the node's is stale
and skipped when popped. No policy scans the tree.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from .tree_node import TreeNode

__all__ = ["DEFAULT_EVICTION_POLICY", "EVICTION_POLICIES", "SLRU_PROTECTED_HITS", "eviction_key"]

EVICTION_POLICIES = ("lru", "lfu", "slru", "priority", "fifo", "mru", "filo", "template")
DEFAULT_EVICTION_POLICY = "lru"
SLRU_PROTECTED_HITS = 2  # a node matched this often leaves the probationary segment


def _slru(node: TreeNode) -> tuple[bool, int]:
    return (node.hit_count >= SLRU_PROTECTED_HITS, node.last_access)


def _mru(node: TreeNode) -> int:
    return -node.last_access


def _filo(node: TreeNode) -> int:
    return -node.created


def _template(node: TreeNode) -> int:
    return node.last_access + node.credit


# attrgetter runs in C: the default policy costs no Python call per push or pop.
_KEYS: dict[str, Callable[[TreeNode], Any]] = {
    "lru": attrgetter("last_access"),
    "lfu": attrgetter("hit_count", "last_access"),
    "slru": _slru,
    "priority": attrgetter("priority", "last_access"),
    "fifo": attrgetter("created"),
    "mru": _mru,
    "filo": _filo,
    "template": _template,
}


def eviction_key(policy: str) -> Callable[[TreeNode], Any]:
    """The key function of `policy`; a ValueError names the choices."""
    key = _KEYS.get(policy)
    if key is None:
        raise ValueError(f"radix_eviction_policy must be one of {EVICTION_POLICIES}, got {policy!r}")
    return key
