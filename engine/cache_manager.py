"""A request's KV bookkeeping: match its prefix, give it slots, hand its KV to the radix cache.

Every pool token is in exactly one place:

| place                 | counted in                    | moves out when                              |
|-----------------------|-------------------------------|---------------------------------------------|
| free                  | allocator.available_tokens    | a request allocates pages                   |
| a running request     | (capacity - the other three)  | it is cached (tree) or released (free)      |
| tree, unlocked        | cache.evictable_size          | locked by a match, or evicted (free)        |
| tree, locked          | cache.protected_size          | the last request holding it releases it     |

Idle (no running request): available + evictable + protected == capacity, nothing locked.
"""
from __future__ import annotations

from .kv_pool import SlotTable
from .page_allocator import PageAllocator
from .radix_cache import RadixCache, TreeNode
from .request import Req


class CacheManager:
    def __init__(self, num_pages: int, page_size: int, slot_table: SlotTable, disable_radix_cache: bool):
        self.page_size = page_size
        self.allocator = PageAllocator(num_pages, page_size)
        self.slot_table = slot_table
        self.cache = None if disable_radix_cache else RadixCache(page_size, self._free_slots)
        self.capacity = num_pages * page_size

    def _free_slots(self, slots: list[int]) -> None:
        self.allocator.free(self.allocator.pages_of(slots))

    # ---- accounting ---------------------------------------------------------------------------
    @property
    def available_tokens(self) -> int:
        return self.allocator.available_tokens

    @property
    def evictable_tokens(self) -> int:
        return self.cache.evictable_size if self.cache else 0

    @property
    def protected_tokens(self) -> int:
        return self.cache.protected_size if self.cache else 0

    def ensure_free_pages(self, num_pages: int) -> bool:
        """Evicts unlocked cached KV if needed; True when `num_pages` can then be allocated."""
        missing = num_pages - self.allocator.num_free_pages
        if missing > 0 and self.cache is not None:
            self.cache.evict(missing * self.page_size)
        return self.allocator.can_allocate(num_pages)

    def pages_needed(self, req: Req, num_new_tokens: int) -> int:
        own_tokens = req.num_allocated + num_new_tokens - req.prefix_len
        return -(-own_tokens // self.page_size) - len(req.own_pages)

    # ---- request lifecycle --------------------------------------------------------------------
    def match_and_lock(self, req: Req) -> tuple[list[int], TreeNode | None]:
        """The cached prefix of the request's tokens (all but the last, which must be computed to
        sample from), locked so that eviction cannot take it."""
        if self.cache is None:
            return [], None
        slots, node = self.cache.match_prefix(req.fill_ids[:-1], req.cache_salt)
        self.cache.inc_lock_ref(node)
        return slots, node

    def unlock(self, node: TreeNode | None) -> None:
        if node is not None:
            self.cache.dec_lock_ref(node)

    def admit(self, req: Req, prefix_slots: list[int], node: TreeNode | None) -> None:
        req.pool_row = self.slot_table.allocate_row()
        req.last_node = node
        req.prefix_len = req.num_allocated = req.num_computed = len(prefix_slots)
        req.own_pages = []
        self.slot_table.write(req.pool_row, 0, prefix_slots)

    def allocate(self, req: Req, num_new_tokens: int) -> None:
        """Gives slots to the next `num_new_tokens` tokens; call ensure_free_pages first."""
        ps = self.page_size
        req.own_pages += self.allocator.allocate(self.pages_needed(req, num_new_tokens))
        start = req.num_allocated - req.prefix_len
        slots = [req.own_pages[q // ps] * ps + q % ps for q in range(start, start + num_new_tokens)]
        self.slot_table.write(req.pool_row, req.num_allocated, slots)
        req.num_allocated += num_new_tokens

    def cache_unfinished(self, req: Req) -> None:
        """After a prefill (or a chunk of one): puts the computed tokens in the tree so that the
        next requests sharing them hit, and re-points the request at the tree's copy."""
        if self.cache is None:
            return
        ps = self.page_size
        aligned = req.num_computed - req.num_computed % ps
        if aligned <= req.prefix_len:
            return
        key = req.fill_ids[:aligned]
        slots = self.slot_table.read(req.pool_row, 0, aligned)
        existing = self.cache.insert(key, slots, req.cache_salt, start=req.last_node)
        num_dup_pages = (existing - req.prefix_len) // ps
        self.allocator.free(req.own_pages[:num_dup_pages])   # the tree already had this KV
        tree_slots, node = self.cache.match_prefix(key, req.cache_salt)
        assert len(tree_slots) == aligned, "a just-inserted prefix must match in full"
        self.slot_table.write(req.pool_row, req.prefix_len, tree_slots[req.prefix_len:existing])
        self.cache.inc_lock_ref(node)
        self.cache.dec_lock_ref(req.last_node)
        req.own_pages = req.own_pages[(aligned - req.prefix_len) // ps:]
        req.last_node, req.prefix_len = node, aligned

    def release(self, req: Req) -> None:
        """Finished, aborted or retracted: computed KV goes to the tree (when on), the rest is freed."""
        ps = self.page_size
        if self.cache is not None:
            aligned = req.num_computed - req.num_computed % ps
            num_tree_pages = 0
            if aligned > req.prefix_len:
                slots = self.slot_table.read(req.pool_row, 0, aligned)
                existing = self.cache.insert(req.fill_ids[:aligned], slots, req.cache_salt, start=req.last_node)
                num_dup_pages = (existing - req.prefix_len) // ps
                self.allocator.free(req.own_pages[:num_dup_pages])
                num_tree_pages = (aligned - req.prefix_len) // ps
            self.allocator.free(req.own_pages[num_tree_pages:])
            self.cache.dec_lock_ref(req.last_node)
        else:
            self.allocator.free(req.own_pages)
        self.slot_table.free_row(req.pool_row)
        req.pool_row, req.last_node, req.own_pages = None, None, []
        req.prefix_len = req.num_allocated = req.num_computed = 0

    def flush(self) -> None:
        if self.cache is not None:
            self.cache.reset()

    def check_idle_invariant(self) -> None:
        total = self.available_tokens + self.evictable_tokens + self.protected_tokens
        assert total == self.capacity, (f"KV leak: available {self.available_tokens} + evictable "
                                        f"{self.evictable_tokens} + protected {self.protected_tokens} "
                                        f"!= capacity {self.capacity}")
        if self.cache is not None:
            locked = [n for n in self.cache.iter_nodes() if n.lock_ref != 0]
            assert not locked, f"{len(locked)} radix nodes still locked while idle"
            assert self.cache.total_size() == self.evictable_tokens, "tree size disagrees with evictable_size"
