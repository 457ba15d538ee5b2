"""The radix tree's node, a prefix match, and the token-list comparison the tree walks with."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

_COMPARE_BLOCK = 64


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists; compares in blocks so long matches stay in C."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while i < n and a[i : i + _COMPARE_BLOCK] == b[i : i + _COMPARE_BLOCK]:
        i += _COMPARE_BLOCK
    while i < n and a[i] == b[i]:
        i += 1
    return i


class TreeNode:
    __slots__ = (
        "key",
        "device_slots",
        "children",
        "parent",
        "depth",
        "lock_ref",
        "pin_ref",
        "last_access",
        "hit_count",
        "created",
        "priority",
        "credit",
        "is_evicted",
        "host_slots",
        "host_lock_ref",
        "namespace",
    )

    def __init__(self, key: tuple[int, ...], device_slots: tuple[int, ...] | None, parent: TreeNode | None):
        # Tuples, not lists: the garbage collector stops tracking tuples of ints, so a large tree
        # costs nothing at collection time (lists of ints were traversed element by element).
        self.key = key  # token ids on the edge from parent to this node
        self.device_slots = device_slots  # device KV slots of those tokens, same length; None if evicted to host
        self.host_slots: tuple[int, ...] | None = None  # host KV slots (HiCache), same length
        self.host_lock_ref = 0  # > 0 while a request is about to load the host copy back
        self.namespace: Hashable = parent.namespace if parent is not None else None  # a root's is set on it
        self.children: dict[Hashable, TreeNode] = {}
        self.parent = parent
        self.depth: int = (parent.depth if parent is not None else 0) + len(key)  # tokens from the root
        self.lock_ref = 0
        self.pin_ref = 0  # TTL pins at or below this node (kvcache/pins.py)
        self.last_access = 0
        self.hit_count = 0  # matches that reached this node
        self.created = 0  # the tree's clock when the node was inserted (fifo, filo)
        self.priority = 0  # highest priority of the requests that inserted or matched it
        self.credit = 0  # tree-clock ticks a template's static prefix looks younger (template_credit.py)
        self.is_evicted = False

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass
class PrefixMatch:
    """`device_slots` end at `node`, the deepest node on the device; `host_slots` follow them and
    end at `host_node` (None when the host adds nothing)."""

    device_slots: list[int]
    node: TreeNode
    host_slots: list[int] = field(default_factory=list)
    host_node: TreeNode | None = None
