"""Attention backends: how a layer's attention reads and writes the paged KV pool.

A backend stores the step's new K/V at `ctx.out_slots`, then attends over each request's KV
through the slot layout documented in `kernels/__init__.py`. Two implementations: torch (any
device, the reference) and Triton (CUDA)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .kernels.decode_attention import decode_attention_torch
from .kernels.extend_attention import extend_attention_torch
from .kernels.store_kv import store_kv_torch
from .kv_pool import KVPool


@dataclass
class ForwardContext:
    """Per-step metadata shared by every layer."""
    backend: "TorchBackend"
    is_decode: bool
    out_slots: torch.Tensor       # [T] slots receiving this step's new K/V
    qo_indptr: torch.Tensor       # [B+1] rows of q per request
    kv_indptr: torch.Tensor       # [B+1]
    kv_indices: torch.Tensor      # [total_kv] slots of each request's whole KV, new tokens included


class TorchBackend:
    name = "torch"

    def __init__(self, pool: KVPool):
        self.pool = pool

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, sm_scale: float,
                ctx: ForwardContext) -> torch.Tensor:
        # q: [T, H, D]; k, v: [T, Hkv, D]
        pool = self.pool
        k_cache, v_cache = pool.k_buffers[layer_id], pool.v_buffers[layer_id]
        k_scale, v_scale = pool.k_scales[layer_id], pool.v_scales[layer_id]
        store_kv_torch(k_cache, v_cache, k, v, ctx.out_slots, k_scale, v_scale)
        if ctx.is_decode:
            return decode_attention_torch(q, k_cache, v_cache, ctx.kv_indptr, ctx.kv_indices, sm_scale,
                                          k_scale, v_scale)
        return extend_attention_torch(q, k_cache, v_cache, ctx.qo_indptr, ctx.kv_indptr, ctx.kv_indices,
                                      sm_scale, k_scale, v_scale)


def create_backend(name: str, pool: KVPool) -> TorchBackend:
    if name in ("auto", "torch"):
        return TorchBackend(pool)
    raise ValueError(f"attention_backend={name!r} is not available in this build; use 'torch' or 'auto'")
