"""Each tenant's fair share of the cache: who counts, how much each may keep, and eviction that
takes first from the tenants above their share, so one tenant's flood cannot evict another's
working set.

A tenant is a namespace of the radix tree (its cache salt). It is active while it sent a request
within `window_s` seconds; its share of the device pool is `capacity * weight / (sum of the active
tenants' weights)`, and an inactive tenant's share is 0. With `is_fair` on, `evict` pops leaves in
the eviction policy's order but sets aside those of tenants at or below their share while some
tenant holds more than its share; when the tenants above their share have nothing evictable left
(`cache.evictable_by_namespace`, so the pass ends without popping the rest of the heap), the
set-aside leaves go in policy order after all (a request is never refused for fairness). The
same shares cap each tenant's TTL pins (`pin_cap`: its share of the pin budget).

What a tenant holds, for its share: its device tokens in the tree (`cache.tokens_by_namespace`,
locked and pinned included), plus its running requests' own pages not yet in the tree
(`in_flight`, kept up to date by the cache manager), plus, for the tenant the eviction makes room
for (`allocating`, several tenants' for a decode step), the tokens it is about to allocate. So a
tenant whose requests in flight fill its share evicts its own cached leaves for the next one, not
another tenant's working set.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .radix_cache import RadixCache

__all__ = ["TenantShares"]


class TenantShares:
    def __init__(self, capacity: int, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.capacity = capacity
        self.window_s = window_s
        self.clock = clock
        self.last_seen: dict[Hashable, float] = {}
        self.weights: dict[Hashable, float] = {}  # the gateway sets each tenant's weight (default 1)
        self.num_fair_evictions = 0  # leaves taken from a tenant above its share while others waited
        self.in_flight: Counter[Hashable] = Counter()  # running requests' own tokens not in the tree yet

    def seen(self, namespace: Hashable) -> None:
        """A request of `namespace` arrived: it is active for the next window."""
        self.last_seen[namespace] = self.clock()

    def active(self) -> dict[Hashable, float]:
        cutoff = self.clock() - self.window_s
        return {ns: self.weights.get(ns, 1.0) for ns, t in self.last_seen.items() if t >= cutoff}

    def fraction(self, namespace: Hashable, active: dict[Hashable, float] | None = None) -> float:
        """The tenant's share, 0..1 (1 when it is the only active tenant)."""
        active = self.active() if active is None else active
        total = sum(active.values())
        return active.get(namespace, 0.0) / total if total else 1.0

    def pin_cap(self, namespace: Hashable, budget: int) -> int:
        return int(budget * self.fraction(namespace))

    def fair_tokens(self) -> dict[Hashable, int]:
        """Each active tenant's share of the device pool, in tokens."""
        active = self.active()
        return {ns: int(self.capacity * self.fraction(ns, active)) for ns in active}

    def evict(self, cache: RadixCache, num_tokens: int, allocating: Mapping[Hashable, int] | None = None) -> int:
        """`cache.evict` with fair shares: leaves of tenants above their share first. `allocating`:
        namespace -> tokens the room is for, counted toward each tenant's holdings."""
        fair = self.fair_tokens()
        held, in_flight = cache.tokens_by_namespace, self.in_flight
        incoming = allocating or {}

        def is_over(ns: Hashable) -> bool:
            return held[ns] + in_flight[ns] + incoming.get(ns, 0) > fair.get(ns, 0)

        evictable = cache.evictable_by_namespace
        # only tenants with something evictable: one with nothing left is no reason to pop the heap
        over = {ns for ns, n in held.items() if n and evictable[ns] and is_over(ns)}
        freed, set_aside = 0, []
        while over and freed < num_tokens and cache._heap:
            entry = heapq.heappop(cache._heap)
            if not cache._is_live(entry):
                continue
            ns = entry[2].namespace
            if ns not in over:
                set_aside.append(entry)
                continue
            freed += cache._evict_leaf(entry[2])
            # counted where others have a share too: a lone active tenant (its share the whole
            # pool) is over it on every eviction, counting what it is about to allocate
            self.num_fair_evictions += fair.get(ns, 0) < self.capacity
            if not is_over(ns) or not evictable[ns]:
                over.discard(ns)  # down to its share, or nothing left: no longer first in line
        for entry in set_aside:  # policy order again for the others; evicted from if still short
            heapq.heappush(cache._heap, entry)
        while freed < num_tokens and cache._heap:
            entry = heapq.heappop(cache._heap)
            if cache._is_live(entry):
                freed += cache._evict_leaf(entry[2])
        return freed
