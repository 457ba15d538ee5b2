"""TTL pins: cached prefixes held against eviction until they expire, each hit restarting the clock
(as Anthropic's `cache_control` TTLs and OpenAI's `prompt_cache_options.ttl` ask).

A pin holds one radix node, the end of the pinned prefix. Like a lock it counts along the node's
path (`pin_ref`), so every token of the prefix is held; unlike a lock it outlives the request that
made it and its tokens sit in the tree's own column:

| a node's state       | lock_ref | pin_ref | counted in              |
|----------------------|----------|---------|-------------------------|
| in use by a request  | > 0      | any     | cache.protected_size    |
| pinned, not in use   | 0        | > 0     | cache.pinned_size       |
| neither              | 0        | 0       | cache.evictable_size    |

Only the last is evicted, so with no request running every page is in the tree (evictable or
pinned) or free. Pins live inside a budget (`max_pinned_tokens`, counted over every pinned token,
in use or not): past it the oldest pin is released, after its prefix is copied to the host and
disk tiers when HiCache is on (`demote`), and each tenant (a namespace: a tenant's cache salt)
holds at most `tenant_cap(namespace)` of it. A pin that cannot be honoured (its tenant's cap full,
the budget 0 or smaller than the prefix) is refused with the reason, and the request is served
unpinned. Expiry is lazy: `expire()` runs before any eviction and any new pin, with the table's
injectable clock, so an expired pin is an ordinary node again by the time it could matter (stats read
the table as it stands).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .tree_node import TreeNode

if TYPE_CHECKING:
    from .radix_cache import RadixCache

__all__ = ["Pin", "PinTable"]


@dataclass(eq=False)
class Pin:
    node: TreeNode
    ttl_s: float
    expires: float
    namespace: Hashable


class PinTable:
    def __init__(
        self,
        cache: RadixCache,
        max_pinned_tokens: int,
        clock: Callable[[], float] = time.monotonic,
        tenant_cap: Callable[[Hashable], int] | None = None,
    ):
        self.cache = cache
        cache.pins = self
        self.max_pinned_tokens = max_pinned_tokens
        self.clock = clock
        self.tenant_cap = tenant_cap  # a namespace's share of the budget; None: the whole budget
        self.demote: Callable[[TreeNode], None] | None = None  # HiCache: copy a released prefix down
        self._pins: dict[TreeNode, Pin] = {}  # insertion order: the oldest pin first
        self._expiry: list[tuple[float, int, Pin]] = []  # lazily refreshed: a popped entry rechecks its pin
        self._seq = itertools.count()
        self.num_pinned_tokens = 0  # every token some pin holds (in use by a request or not)
        self.tokens_by_namespace: Counter[Hashable] = Counter()
        self.num_expired = self.num_released_over_budget = self.num_refused = 0

    def __len__(self) -> int:
        return len(self._pins)

    # ---- pinning ------------------------------------------------------------------------------
    def pin(self, node: TreeNode, ttl_s: float, namespace: Hashable) -> str | None:
        """Pins the prefix ending at `node` (a device node) for `ttl_s` seconds; an existing pin there
        restarts, keeping the longer TTL. Returns None when pinned, else why not (nothing changed)."""
        assert node.device_slots is not None and node.parent is not None, "pin a device node, not a root"
        now = self.clock()
        self.expire(now)
        pin = self._pins.get(node)
        if pin is not None:
            pin.ttl_s = max(pin.ttl_s, ttl_s)
            self._set_expiry(pin, max(pin.expires, now + ttl_s))
            return None
        new = self._unpinned_tokens(node)
        cap = None if self.tenant_cap is None else min(self.max_pinned_tokens, self.tenant_cap(namespace))
        reason = None
        if self.max_pinned_tokens == 0:
            reason = "pins are off on this server (max_pinned_ratio 0)"
        elif new > self.max_pinned_tokens:
            reason = f"the prefix ({new} tokens) is larger than the pin budget ({self.max_pinned_tokens} tokens)"
        elif cap is not None and self.tokens_by_namespace[namespace] + new > cap:
            reason = f"this tenant's pins are at their cap ({cap} tokens)"
        if reason is not None:
            self.num_refused += 1
            return reason
        while self.num_pinned_tokens + new > self.max_pinned_tokens:
            oldest = next(iter(self._pins.values()))
            if self.demote is not None:
                self.demote(oldest.node)
            self._release(oldest)
            self.num_released_over_budget += 1
            new = self._unpinned_tokens(node)
        pin = Pin(node, ttl_s, now + ttl_s, namespace)
        self._pins[node] = pin
        self._add_ref(node, namespace, +1)
        heapq.heappush(self._expiry, (pin.expires, next(self._seq), pin))
        return None

    def touch(self, node: TreeNode | None) -> None:
        """A request matched the prefix ending at `node`: every pin on its path restarts its TTL."""
        if not self._pins or node is None:
            return
        now = self.clock()
        while node.parent is not None:
            pin = self._pins.get(node) if node.pin_ref else None
            if pin is not None:
                pin.expires = now + pin.ttl_s  # its heap entry is rechecked when popped
            node = node.parent

    def expire(self, now: float | None = None) -> int:
        """Releases every pin past its time; returns how many."""
        now = self.clock() if now is None else now
        released = 0
        while self._expiry and self._expiry[0][0] <= now:
            _, _, pin = heapq.heappop(self._expiry)
            if self._pins.get(pin.node) is not pin:
                continue  # released already
            if pin.expires > now:  # restarted by a hit since this entry was pushed
                heapq.heappush(self._expiry, (pin.expires, next(self._seq), pin))
                continue
            self._release(pin)
            self.num_expired += 1
            released += 1
        return released

    def _set_expiry(self, pin: Pin, expires: float) -> None:
        pin.expires = expires
        heapq.heappush(self._expiry, (expires, next(self._seq), pin))

    def _release(self, pin: Pin) -> None:
        del self._pins[pin.node]
        self._add_ref(pin.node, pin.namespace, -1)
        if self.cache._is_evictable_leaf(pin.node):
            self.cache._push(pin.node)

    # ---- the tree's books ---------------------------------------------------------------------
    @staticmethod
    def _unpinned_tokens(node: TreeNode) -> int:
        n = 0
        while node.parent is not None and node.pin_ref == 0:  # above a pinned node everything is pinned
            n += len(node.key)
            node = node.parent
        return n

    def _add_ref(self, node: TreeNode, namespace: Hashable, delta: int) -> None:
        """pin_ref += delta along the path; tokens that become (un)pinned move between the columns."""
        cache, moved = self.cache, 0
        while node.parent is not None:
            if (node.pin_ref == 0) if delta > 0 else (node.pin_ref == 1):
                n = len(node.key)
                moved += n
                if node.lock_ref == 0:
                    cache.add_evictable(node, -delta * n)
                    cache.pinned_size += delta * n
            node.pin_ref += delta
            assert node.pin_ref >= 0, "unpinned a node twice"
            node = node.parent
        self.num_pinned_tokens += delta * moved
        self.tokens_by_namespace[namespace] += delta * moved

    def clear(self, namespace: Hashable = None, everything: bool = True) -> None:
        """The tree dropped every node (or one namespace's): their pins go without touching the nodes."""
        for node, pin in list(self._pins.items()):
            if everything or pin.namespace == namespace:
                del self._pins[node]
        dropped = sum(self.tokens_by_namespace.values()) if everything else self.tokens_by_namespace[namespace]
        self.num_pinned_tokens -= dropped
        if everything:
            self.tokens_by_namespace.clear()
            self._expiry.clear()
        else:
            self.tokens_by_namespace.pop(namespace, None)

    # ---- introspection ------------------------------------------------------------------------
    def tokens_by_tier(self) -> dict[str, int]:
        """Pinned tokens on the device, and of those the ones with a host copy (HiCache)."""
        seen: set[int] = set()
        host = 0
        for node in list(self._pins):  # a snapshot: stats may read it off the engine's thread
            while node.parent is not None and id(node) not in seen:
                seen.add(id(node))
                host += len(node.key) if node.host_slots is not None else 0
                node = node.parent
        return {"device": self.num_pinned_tokens, "host": host}
