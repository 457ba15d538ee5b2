"""Random ragged batches laid out in a paged KV pool, for the kernel tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PagedBatch:
    """A ragged batch laid out in a paged pool, with every slot no request owns poisoned."""

    k_cache: torch.Tensor  # [num_slots, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    kv_indptr: torch.Tensor  # [batch + 1] int64
    kv_indices: torch.Tensor  # [total_kv] int64
    k_scale: float
    v_scale: float


def make_paged_batch(
    kv_lens: list[int],
    num_kv_heads: int,
    head_dim: int,
    page_size: int,
    dtype: torch.dtype,
    device: torch.device,
    generator: torch.Generator,
    share_prefix: int = 0,
    scale: float = 1.0,
) -> PagedBatch:
    """Each request gets whole pages drawn at random from the pool (so its KV crosses page
    boundaries in no particular order); slot 0 is a padding slot no request owns, as in SGLang.
    With `share_prefix`, request 1 reuses request 0's first share_prefix tokens' pages (a radix
    hit). Unowned slots (padding, page tails, free pages) hold NaN, so reading one fails."""
    pages_needed = [-(-n // page_size) for n in kv_lens]
    shared_pages = share_prefix // page_size
    num_pages = 1 + sum(pages_needed) - (shared_pages if len(kv_lens) > 1 else 0) + 3
    order = torch.randperm(num_pages - 1, generator=generator) + 1  # page 0 is padding
    next_page = 0
    tables: list[list[int]] = []
    for b, need in enumerate(pages_needed):
        reused = tables[0][:shared_pages] if b == 1 else []
        fresh = order[next_page : next_page + need - len(reused)].tolist()
        next_page += len(fresh)
        tables.append(reused + fresh)
    indices = [
        p * page_size + i % page_size
        for table, n in zip(tables, kv_lens, strict=False)
        for i, p in ((i, table[i // page_size]) for i in range(n))
    ]
    num_slots = num_pages * page_size
    values_dtype = torch.float32 if dtype.itemsize == 1 else dtype
    k = torch.full((num_slots, num_kv_heads, head_dim), float("nan"), dtype=torch.float32)
    v = k.clone()
    owned = torch.tensor(indices, dtype=torch.int64)
    k[owned] = torch.randn((len(indices), num_kv_heads, head_dim), generator=generator)
    v[owned] = torch.randn((len(indices), num_kv_heads, head_dim), generator=generator)
    if dtype.itemsize == 1:
        # FP8 pools hold x / scale; NaN is representable in both formats, so the poison survives.
        k, v = (k / scale).to(dtype), (v / scale).to(dtype)
    else:
        k, v = k.to(values_dtype), v.to(values_dtype)
    indptr = torch.tensor([0] + torch.tensor(kv_lens).cumsum(0).tolist(), dtype=torch.int64)
    return PagedBatch(
        k.to(device),
        v.to(device),
        indptr.to(device),
        owned.to(device),
        scale if dtype.itemsize == 1 else 1.0,
        scale if dtype.itemsize == 1 else 1.0,
    )


def max_rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref|; NaN anywhere in `out` gives NaN, which fails any `<=`."""
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
