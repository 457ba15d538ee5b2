"""The request-to-slot table: which pool slot holds each token of each running request."""

from __future__ import annotations

import torch


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
            self.table[row, start : start + len(slots)] = torch.tensor(slots, dtype=torch.int64)

    def read(self, row: int, start: int, end: int) -> list[int]:
        return self.table[row, start:end].tolist()
