"""The KV pool: per-layer K and V buffers addressed by slot, plus the request-to-slot table."""
from __future__ import annotations

import torch


class KVPool:
    """k_buffers[layer], v_buffers[layer]: [num_slots, num_kv_heads, head_dim]."""

    def __init__(self, num_slots: int, num_layers: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: str | torch.device):
        self.num_slots = num_slots
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (num_slots, num_kv_heads, head_dim)
        self.k_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        # Per-layer dequantization scales; 1.0 for float pools.
        self.k_scales = [1.0] * num_layers
        self.v_scales = [1.0] * num_layers

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * num_kv_heads * head_dim * elem

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.k_buffers + self.v_buffers)

    def read(self, slots: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Raw copies of every layer's K and V at `slots` (for moving pages between tiers)."""
        return [k[slots].clone() for k in self.k_buffers], [v[slots].clone() for v in self.v_buffers]

    def write(self, slots: torch.Tensor, ks: list[torch.Tensor], vs: list[torch.Tensor]) -> None:
        for layer in range(self.num_layers):
            self.k_buffers[layer][slots] = ks[layer]
            self.v_buffers[layer][slots] = vs[layer]


class SlotTable:
    """req_to_slot[row, pos]: the pool slot holding the KV of token `pos` of the request in `row`."""

    def __init__(self, num_rows: int, max_context_len: int, device: str | torch.device):
        self.table = torch.zeros((num_rows, max_context_len), dtype=torch.int64, device=device)
        self._free_rows = list(range(num_rows - 1, -1, -1))

    @property
    def num_free_rows(self) -> int:
        return len(self._free_rows)

    def allocate_row(self) -> int:
        assert self._free_rows, "no free request rows"
        return self._free_rows.pop()

    def free_row(self, row: int) -> None:
        self._free_rows.append(row)

    def write(self, row: int, start: int, slots: list[int]) -> None:
        if slots:
            self.table[row, start:start + len(slots)] = torch.tensor(slots, dtype=torch.int64)

    def read(self, row: int, start: int, end: int) -> list[int]:
        return self.table[row, start:end].tolist()
