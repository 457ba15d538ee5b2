"""Pages of KV slots: a free list. Slot s of page p is p * page_size + s."""

from __future__ import annotations


class PageAllocator:
    def __init__(self, num_pages: int, page_size: int):
        self.num_pages = num_pages
        self.page_size = page_size
        # Pop from the end; reversed so that a fresh pool hands out low page ids first.
        self._free: list[int] = list(range(num_pages - 1, -1, -1))
        self._is_free = bytearray([1]) * num_pages

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def available_tokens(self) -> int:
        return len(self._free) * self.page_size

    def can_allocate(self, num_pages: int) -> bool:
        return num_pages <= len(self._free)

    def allocate(self, num_pages: int) -> list[int]:
        assert self.can_allocate(num_pages), f"allocate({num_pages}) with {len(self._free)} pages free"
        pages = self._free[len(self._free) - num_pages :]
        del self._free[len(self._free) - num_pages :]
        for p in pages:
            self._is_free[p] = 0
        return pages

    def free(self, pages: list[int]) -> None:
        for p in pages:
            assert not self._is_free[p], f"page {p} freed twice"
            self._is_free[p] = 1
        self._free.extend(pages)

    def pages_of(self, slots) -> list[int]:
        """The pages that a page-aligned run of slots occupies."""
        ps = self.page_size
        return list(slots) if ps == 1 else [s // ps for s in slots[::ps]]

    def slots_of(self, pages: list[int]) -> list[int]:
        ps = self.page_size
        if ps == 1:
            return list(pages)
        return [p * ps + i for p in pages for i in range(ps)]
