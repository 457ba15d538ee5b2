"""The host tier of HiCache: a second KV pool in CPU memory, paged like the device pool.

Its buffers mirror the device pool's per-layer buffers (same per-slot shape and dtype, whatever
that dtype is: an FP8 pool stores bytes here too), so pages move between tiers as raw copies
through `KVPool.read` / `KVPool.write`. Pinned when the device is CUDA, so copies can overlap."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..kvcache.kv_pool import KVPool
from ..kvcache.page_allocator import PageAllocator


class HostPool:
    """k_buffers[layer], v_buffers[layer]: [num_slots, *device per-slot shape], on the CPU."""

    def __init__(self, num_pages: int, page_size: int, like: KVPool):
        self.page_size = page_size
        self.allocator = PageAllocator(num_pages, page_size)
        self.capacity = num_pages * page_size
        pin = like.device.type == "cuda"

        def mirror(buf: torch.Tensor) -> torch.Tensor:
            return torch.zeros((self.capacity, *buf.shape[1:]), dtype=buf.dtype, pin_memory=pin)

        self.k_buffers = [mirror(b) for b in like.k_buffers]
        self.v_buffers = [mirror(b) for b in like.v_buffers]
        self.bytes_per_token = sum(b[0].numel() * b.element_size() for b in self.k_buffers + self.v_buffers)

    @property
    def available_tokens(self) -> int:
        return self.allocator.available_tokens

    @property
    def nbytes(self) -> int:
        return self.capacity * self.bytes_per_token

    def can_allocate(self, num_tokens: int) -> bool:
        return self.allocator.can_allocate(num_tokens // self.page_size)

    def allocate(self, num_tokens: int) -> list[int]:
        """Slots for a page-aligned run of `num_tokens` tokens."""
        assert num_tokens % self.page_size == 0, "host allocations are page-aligned"
        return self.allocator.slots_of(self.allocator.allocate(num_tokens // self.page_size))

    def free(self, slots: Sequence[int]) -> None:
        self.allocator.free(self.allocator.pages_of(slots))

    def read(self, slots: list[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        idx = torch.tensor(slots, dtype=torch.int64)
        return [k[idx] for k in self.k_buffers], [v[idx] for v in self.v_buffers]

    def write(self, slots: list[int], ks: list[torch.Tensor], vs: list[torch.Tensor]) -> None:
        idx = torch.tensor(slots, dtype=torch.int64)
        for layer, (k, v) in enumerate(zip(ks, vs, strict=False)):
            self.k_buffers[layer][idx] = k.to("cpu")
            self.v_buffers[layer][idx] = v.to("cpu")
