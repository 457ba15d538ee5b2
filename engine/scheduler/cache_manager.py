"""A request's KV bookkeeping: match its prefix, give it slots, hand its KV to the radix cache.

Every pool token is in exactly one place:

| place                 | counted in                    | moves out when                              |
|-----------------------|-------------------------------|---------------------------------------------|
| free                  | allocator.available_tokens    | a request allocates pages                   |
| a running request     | (capacity - the other three)  | it is cached (tree) or released (free)      |
| tree, unlocked        | cache.evictable_size          | locked by a match, or evicted (free)        |
| tree, locked          | cache.protected_size          | the last request holding it releases it     |
| tree, pinned          | cache.pinned_size             | its TTL pin expires or is released          |

Idle (no running request): available + evictable + protected + pinned == capacity, nothing locked.
With HiCache the host and disk tiers keep their own books (see `hicache/tier_controller.py`), checked here too.

A prefix found on host or disk is loaded back at admission into pages the request allocates, as
if it had computed them (`num_computed` covers them), so the prefill skips them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import EngineConfig
from ..hicache.storage_tier import ReadBlocks
from ..hicache.tier_controller import TierController
from ..kvcache.page_allocator import PageAllocator
from ..kvcache.pins import PinTable
from ..kvcache.radix_cache import RadixCache, TreeNode
from ..kvcache.slot_table import SlotTable
from ..kvcache.template_credit import give_credit
from ..kvcache.tenant_share import TenantShares
from .request import Req


@dataclass
class PrefixHit:
    """A request's cached prefix in every tier, locked from `match_and_lock` to `admit` / `unlock`:
    device slots (ending at `node`), then host slots (ending at `host_node`), then disk blocks, then
    blocks from the remote store."""

    device_slots: list[int]
    node: TreeNode | None
    host_slots: list[int] = field(default_factory=list)
    host_node: TreeNode | None = None
    disk: ReadBlocks | None = None
    remote: ReadBlocks | None = None
    is_loading: bool = False  # its disk or remote blocks are being read: admit it later

    @property
    def num_load_tokens(self) -> int:
        return len(self.host_slots) + sum(b.num_tokens for b in (self.disk, self.remote) if b is not None)

    @property
    def num_tokens(self) -> int:
        return len(self.device_slots) + self.num_load_tokens

    def tokens_by_tier(self) -> dict[str, int]:
        return {
            "device": len(self.device_slots),
            "host": len(self.host_slots),
            "disk": self.disk.num_tokens if self.disk else 0,
            "remote": self.remote.num_tokens if self.remote else 0,
        }


class CacheManager:
    def __init__(
        self,
        num_pages: int,
        page_size: int,
        slot_table: SlotTable,
        disable_radix_cache: bool,
        hicache: TierController | None = None,
        eviction_policy: str = "lru",
        low_priority_values_first: bool = False,
    ):
        self.page_size = page_size
        self.priority_sign = -1 if low_priority_values_first else 1  # the tree keeps "higher matters more"
        self.allocator = PageAllocator(num_pages, page_size)
        self.slot_table = slot_table
        self.radix_cache = None if disable_radix_cache else RadixCache(page_size, self._free_slots, eviction_policy)
        self.capacity = num_pages * page_size
        self.hicache = hicache
        self.before_release: Callable[[Req], None] | None = None  # disaggregation: reads a prefill's KV out
        self.after_chunk: Callable[[Req], None] | None = None  # disaggregation: streams it chunk by chunk
        if hicache is not None:
            assert self.radix_cache is not None, "HiCache needs the radix cache"
            hicache.attach(self.radix_cache)
        self.pins: PinTable | None = None  # TTL pins (kvcache/pins.py); set by from_config
        self.shares = TenantShares(self.capacity)  # tenants' fair shares (kvcache/tenant_share.py)
        self.num_requests_released = 0  # the tree clock's rate per request, for template credit

    def enable_pins(self, max_pinned_ratio: float, clock: Any = None, tenant_cap: Any = None) -> PinTable | None:
        """TTL pins inside `max_pinned_ratio` of the pool; with HiCache a released pin is copied down first."""
        if self.radix_cache is None:
            return None
        kwargs = {"clock": clock} if clock is not None else {}
        budget = int(max_pinned_ratio * self.capacity)
        if tenant_cap is None:  # each tenant's pins: its fair share of the budget
            tenant_cap = lambda namespace: self.shares.pin_cap(namespace, budget)  # noqa: E731
        self.pins = PinTable(self.radix_cache, budget, tenant_cap=tenant_cap, **kwargs)
        if self.hicache is not None:
            self.pins.demote = self.hicache.backup
        return self.pins

    @classmethod
    def from_config(
        cls, config: EngineConfig, num_pages: int, slot_table: SlotTable, hicache: TierController | None
    ) -> CacheManager:
        manager = cls(
            num_pages,
            config.page_size,
            slot_table,
            config.disable_radix_cache,
            hicache,
            config.radix_eviction_policy,
            config.schedule_low_priority_values_first,
        )
        manager.shares.window_s = config.tenant_active_window_s
        if config.tenant_cache_fairness and manager.radix_cache is not None:
            manager.radix_cache.fair = manager.shares
        manager.enable_pins(config.max_pinned_ratio)
        return manager

    def set_tenant_weight(self, namespace: object, weight: float) -> None:
        """The tenant's weight in fair shares (the gateway's keys file); 1 unless set."""
        self.shares.weights[namespace] = weight

    def _free_slots(self, slots: Sequence[int]) -> None:
        self.allocator.free(self.allocator.pages_of(slots))

    # ---- accounting ---------------------------------------------------------------------------
    @property
    def available_tokens(self) -> int:
        return self.allocator.available_tokens

    @property
    def evictable_tokens(self) -> int:
        return self.radix_cache.evictable_size if self.radix_cache else 0

    @property
    def protected_tokens(self) -> int:
        return self.radix_cache.protected_size if self.radix_cache else 0

    @property
    def pinned_tokens(self) -> int:
        """Pinned tokens no request holds (a pinned prefix in use counts as protected)."""
        return self.radix_cache.pinned_size if self.radix_cache else 0

    def ensure_free_pages(self, num_pages: int, for_req: Req | None = None) -> bool:
        """Evicts unlocked cached KV if needed; True when `num_pages` can then be allocated. `for_req`:
        the one request the pages are for, whose tenant's share counts them (None: several requests')."""
        if for_req is None:
            return self._ensure(num_pages, None)
        return self._ensure(num_pages, {for_req.cache_salt: num_pages * self.page_size})

    def ensure_decode_pages(self, reqs: Sequence[Req]) -> bool:
        """`ensure_free_pages` for one more token of each of `reqs` (a decode step), each tenant's
        new pages counted toward its share, so a step of one tenant's many streams evicts its own."""
        incoming: dict[Hashable, int] = {}
        num_pages = 0
        for req in reqs:
            n = self.pages_needed(req, 1)
            num_pages += n
            incoming[req.cache_salt] = incoming.get(req.cache_salt, 0) + n * self.page_size
        return self._ensure(num_pages, incoming)

    def _ensure(self, num_pages: int, allocating: Mapping[Hashable, int] | None) -> bool:
        missing = num_pages - self.allocator.num_free_pages
        if missing > 0 and self.radix_cache is not None:
            self.radix_cache.evict(missing * self.page_size, allocating)
        return self.allocator.can_allocate(num_pages)

    def _set_own_pages(self, req: Req, pages: list[int]) -> None:
        """Every change to a request's own pages goes here: its tenant's in-flight tokens follow."""
        in_flight, ns = self.shares.in_flight, req.cache_salt
        in_flight[ns] += (len(pages) - len(req.own_pages)) * self.page_size
        if not in_flight[ns]:
            del in_flight[ns]  # a tenant with nothing running leaves no entry behind
        req.own_pages = pages

    def pages_needed(self, req: Req, num_new_tokens: int) -> int:
        own_tokens = req.num_allocated + num_new_tokens - req.prefix_len
        return -(-own_tokens // self.page_size) - len(req.own_pages)

    # ---- request lifecycle --------------------------------------------------------------------
    def match_and_lock(self, req: Req) -> PrefixHit:
        """The cached prefix of the request's tokens (all but the last, which must be computed to
        sample from), locked so that eviction cannot take it. With a disk or remote tier, starts
        reading the blocks past the in-memory prefix (`is_loading` until they are read)."""
        if self.radix_cache is None:
            return PrefixHit([], None)
        key = req.fill_ids()[: req.num_matchable_tokens]
        m = self.radix_cache.match(key, req.cache_salt, priority=self.tree_priority(req))
        self.radix_cache.inc_lock_ref(m.node)
        if self.pins is not None:
            self.pins.touch(m.node)  # a hit restarts the TTL of every pin on its path
        hit = PrefixHit(m.device_slots, m.node)
        if self.hicache is not None:
            hit.host_slots, hit.host_node = m.host_slots, m.host_node
            self.hicache.lock_host(m.host_node)
            hit.disk, hit.remote, hit.is_loading = self.hicache.match_storage(
                req.rid, key, req.cache_salt, hit.num_tokens
            )
        return hit

    def tree_priority(self, req: Req) -> int:
        """What the `priority` eviction policy keeps: the request's priority, higher meaning kept longer."""
        return self.priority_sign * req.sampling.priority

    def unlock(self, hit: PrefixHit) -> None:
        if hit.node is not None:
            assert self.radix_cache is not None  # a hit has a node only with the radix cache
            self.radix_cache.dec_lock_ref(hit.node)
        if self.hicache is not None:
            self.hicache.unlock_host(hit.host_node)

    def pages_to_admit(self, hit: PrefixHit, first_chunk: int) -> int:
        """Pages to allocate at admission: the host/disk part loaded back, then the first chunk."""
        return hit.num_load_tokens // self.page_size + -(-first_chunk // self.page_size)

    def admit(self, req: Req, hit: PrefixHit) -> None:
        """Gives the request a row holding its device prefix, then loads its host and disk prefix
        into pages it allocates (call `ensure_free_pages(pages_to_admit(...))` first)."""
        req.pool_row = self.slot_table.allocate_row()
        req.last_node = hit.node
        req.prefix_len = req.num_allocated = req.num_computed = len(hit.device_slots)
        self._set_own_pages(req, [])
        self.slot_table.write(req.pool_row, 0, hit.device_slots)
        if self.hicache is None:
            return
        num_load = hit.num_load_tokens
        if num_load:
            self.allocate(req, num_load)
            self.hicache.load(
                self.slot_table.read(req.pool_row, req.prefix_len, req.num_allocated),
                hit.host_slots,
                hit.disk,
                hit.remote,
                req.rid,
            )
            req.num_computed += num_load
        self.hicache.unlock_host(hit.host_node)
        self.hicache.forget(req.rid)
        if hit.num_tokens:
            self.hicache.on_hit(hit.node)

    def forget(self, req: Req) -> None:
        """The request left (finished or aborted): drops any disk or remote read made for it."""
        if self.hicache is not None:
            self.hicache.forget(req.rid)

    def wait_for_loads(self, timeout: float) -> None:
        """Called when nothing could be scheduled: waits for a disk or remote read instead of spinning."""
        if self.hicache is not None:
            self.hicache.wait_prefetch(timeout)

    def allocate(self, req: Req, num_new_tokens: int) -> None:
        """Gives slots to the next `num_new_tokens` tokens; call ensure_free_pages first."""
        ps = self.page_size
        self._set_own_pages(req, req.own_pages + self.allocator.allocate(self.pages_needed(req, num_new_tokens)))
        start = req.num_allocated - req.prefix_len
        slots = [req.own_pages[q // ps] * ps + q % ps for q in range(start, start + num_new_tokens)]
        self.slot_table.write(req.table_row(), req.num_allocated, slots)
        req.num_allocated += num_new_tokens

    def _insert_computed(self, req: Req, aligned: int) -> int:
        """Inserts the request's first `aligned` tokens and their slots into the tree and frees the
        request's pages the tree already had (duplicate KV); returns how many tokens it had."""
        assert self.radix_cache is not None
        slots = self.slot_table.read(req.table_row(), 0, aligned)
        existing = self.radix_cache.insert(
            req.fill_ids()[:aligned], slots, req.cache_salt, start=req.last_node, priority=self.tree_priority(req)
        )
        self.allocator.free(req.own_pages[: (existing - req.prefix_len) // self.page_size])
        return existing

    def cache_unfinished(self, req: Req) -> None:
        """After a prefill (or a chunk of one): puts the computed tokens in the tree so that the
        next requests sharing them hit, and re-points the request at the tree's copy."""
        if self.after_chunk is not None:
            self.after_chunk(req)
        if self.radix_cache is None:
            return
        ps = self.page_size
        aligned = req.num_computed - req.num_computed % ps
        if aligned <= req.prefix_len:
            return
        key = req.fill_ids()[:aligned]
        existing = self._insert_computed(req, aligned)
        tree_slots, node = self.radix_cache.match_prefix(key, req.cache_salt, count_hit=False)
        assert len(tree_slots) == aligned, "a just-inserted prefix must match in full"
        self.slot_table.write(req.table_row(), req.prefix_len, tree_slots[req.prefix_len : existing])
        self.radix_cache.inc_lock_ref(node)
        self.radix_cache.dec_lock_ref(req.last_node)
        self._set_own_pages(req, req.own_pages[(aligned - req.prefix_len) // ps :])
        req.last_node, req.prefix_len = node, aligned
        if self.hicache is not None:
            self.hicache.on_insert(node)
        self._apply_pins(req, aligned)

    def release(self, req: Req) -> None:
        """Finished, aborted or retracted: computed KV goes to the tree (when on), the rest is freed."""
        if self.before_release is not None:
            self.before_release(req)
        ps = self.page_size
        if self.radix_cache is not None:
            aligned = req.num_computed - req.num_computed % ps
            num_tree_pages = 0
            if aligned > req.prefix_len:
                self._insert_computed(req, aligned)
                num_tree_pages = (aligned - req.prefix_len) // ps
                if self.hicache is not None:
                    self.hicache.on_insert(
                        self.radix_cache.match_prefix(req.fill_ids()[:aligned], req.cache_salt, count_hit=False)[1]
                    )
            self.allocator.free(req.own_pages[num_tree_pages:])
            self._apply_pins(req, aligned)
            self._give_credit(req, aligned)
            self.radix_cache.dec_lock_ref(req.last_node)
        else:
            self.allocator.free(req.own_pages)
        self.slot_table.free_row(req.table_row())
        self._set_own_pages(req, [])
        req.pool_row, req.last_node = None, None
        req.prefix_len = req.num_allocated = req.num_computed = 0

    def pin_stats(self) -> dict[str, Any]:
        """`pinned_tokens_<tier>`, the pins' counts and budget, fair evictions (`/server_info`, `/metrics`)."""
        pins = self.pins  # read as it stands: stats() may run off the engine's thread, so nothing expires here
        tiers = pins.tokens_by_tier() if pins is not None else {"device": 0, "host": 0}
        return {
            "num_pins": len(pins) if pins is not None else 0,
            "max_pinned_tokens": pins.max_pinned_tokens if pins is not None else 0,
            **{f"pinned_tokens_{tier}": n for tier, n in tiers.items()},
            "num_pins_expired": pins.num_expired if pins is not None else 0,
            "num_pins_released_over_budget": pins.num_released_over_budget if pins is not None else 0,
            "num_pins_refused": pins.num_refused if pins is not None else 0,
            "num_fair_evictions": self.shares.num_fair_evictions,
        }

    def _apply_pins(self, req: Req, computed: int) -> None:
        """Pins each prefix the request asked for once its tokens are in the tree (page-aligned down);
        `req.pin_results[i]` says what became of pin i: None while its prefix is not computed yet."""
        for i, (tokens, ttl_s) in enumerate(req.sampling.cache_pins):
            if req.pin_results[i] is not None:
                continue
            end = min(tokens, len(req.origin_input_ids))  # a pin holds part of the prompt, never the output
            end -= end % self.page_size
            if end == 0:
                req.pin_results[i] = (0, ttl_s, "the prefix is shorter than a page: nothing to pin")
            elif self.pins is None or self.radix_cache is None:
                req.pin_results[i] = (end, ttl_s, "the radix cache is off: nothing is kept")
            elif end <= computed:
                node = self.radix_cache.match_prefix(req.fill_ids()[:end], req.cache_salt, count_hit=False)[1]
                assert node.depth == end, "a computed prefix must be in the tree"
                req.pin_results[i] = (end, ttl_s, self.pins.pin(node, ttl_s, req.cache_salt))

    def _give_credit(self, req: Req, computed: int) -> None:
        """The `template` policy's credit for the request's static prefix, once it is in the tree
        (`SamplingParams.cache_credit`; kvcache/template_credit.py), counting the request served."""
        assert self.radix_cache is not None
        self.num_requests_released += 1
        if req.sampling.cache_credit:
            tokens, requests = req.sampling.cache_credit
            end = min(tokens, len(req.origin_input_ids), computed)
            give_credit(self.radix_cache, req.fill_ids()[:end], req.cache_salt, requests, self.num_requests_released)

    def flush(self) -> None:
        if self.radix_cache is not None:
            self.radix_cache.reset()

    def check_idle_invariant(self) -> None:
        total = self.available_tokens + self.evictable_tokens + self.protected_tokens + self.pinned_tokens
        assert total == self.capacity, (
            f"KV leak: available {self.available_tokens} + evictable {self.evictable_tokens} + protected "
            f"{self.protected_tokens} + pinned {self.pinned_tokens} != capacity {self.capacity}"
        )
        if self.radix_cache is not None:
            locked = [n for n in self.radix_cache.iter_nodes() if n.lock_ref != 0]
            assert not locked, f"{len(locked)} radix nodes still locked while idle"
            assert not self.shares.in_flight, f"in-flight tokens left while idle: {dict(self.shares.in_flight)}"
            tree = self.radix_cache.evictable_size + self.radix_cache.pinned_size
            assert self.radix_cache.total_size() == tree, "tree size disagrees with evictable + pinned"
        if self.hicache is not None:
            self.hicache.check_idle_invariant()
