"""Attention backends: how a layer's attention reads and writes the paged KV pool.

A backend stores the step's new K/V at `ctx.out_slots` (quantized if the pool is FP8), then
attends over each request's KV through the slot layout documented in `kernels/__init__.py`,
dequantizing with the layer's scales. Two implementations share that code and differ only in
their kernels, which share signatures: torch (any device, the reference) and Triton (compiled
on CUDA; on CPU it runs under Triton's interpreter, which is slow and meant for tests)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import torch

from .kernels.decode_attention import decode_attention_torch, decode_attention_triton
from .kernels.extend_attention import extend_attention_torch, extend_attention_triton
from .kernels.store_kv import store_kv_torch, store_kv_triton
from .kernels.triton_runtime import HAS_TRITON, require_triton
from .kv_pool import KVPool


@dataclass
class ForwardContext:
    """Per-step metadata shared by every layer."""
    backend: "AttentionBackend"
    is_decode: bool
    out_slots: torch.Tensor       # [T] slots receiving this step's new K/V
    qo_indptr: torch.Tensor       # [B+1] rows of q per request
    kv_indptr: torch.Tensor       # [B+1]
    kv_indices: torch.Tensor      # [total_kv] slots of each request's whole KV, new tokens included
    max_q_len: int | None = None  # longest new-token run (extend); read from qo_indptr once per step if None


class AttentionBackend:
    """One set of kernels over the pool; subclasses name the set."""
    name: ClassVar[str]
    store_kv: ClassVar[Callable[..., None]]
    decode_attention: ClassVar[Callable[..., torch.Tensor]]
    extend_attention: ClassVar[Callable[..., torch.Tensor]]

    def __init__(self, pool: KVPool):
        self.pool = pool

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, sm_scale: float,
                ctx: ForwardContext) -> torch.Tensor:
        # q: [T, H, D]; k, v: [T, Hkv, D]
        pool = self.pool
        pool.calibrate_scales(layer_id, k, v)
        k_cache, v_cache = pool.k_buffers[layer_id], pool.v_buffers[layer_id]
        k_scale, v_scale = pool.k_scales[layer_id], pool.v_scales[layer_id]
        self.store_kv(k_cache, v_cache, k, v, ctx.out_slots, k_scale, v_scale)
        if ctx.is_decode:
            return self.decode_attention(q, k_cache, v_cache, ctx.kv_indptr, ctx.kv_indices, sm_scale,
                                         k_scale, v_scale)
        if ctx.max_q_len is None:   # one device sync per step, shared by every layer
            ctx.max_q_len = int((ctx.qo_indptr[1:] - ctx.qo_indptr[:-1]).max()) if ctx.qo_indptr.numel() > 1 else 0
        return self.extend_attention(q, k_cache, v_cache, ctx.qo_indptr, ctx.kv_indptr, ctx.kv_indices,
                                     sm_scale, k_scale, v_scale, max_q_len=ctx.max_q_len)


class TorchBackend(AttentionBackend):
    name = "torch"
    store_kv = staticmethod(store_kv_torch)
    decode_attention = staticmethod(decode_attention_torch)
    extend_attention = staticmethod(extend_attention_torch)


class TritonBackend(AttentionBackend):
    name = "triton"
    store_kv = staticmethod(store_kv_triton)
    decode_attention = staticmethod(decode_attention_triton)
    extend_attention = staticmethod(extend_attention_triton)


def create_backend(name: str, pool: KVPool) -> AttentionBackend:
    """"auto" is Triton on CUDA (when installed) and torch elsewhere; "torch" and "triton" force one."""
    if name == "auto":
        name = "triton" if pool.device.type == "cuda" and HAS_TRITON else "torch"
    if name == "torch":
        return TorchBackend(pool)
    if name == "triton":
        require_triton()
        return TritonBackend(pool)
    raise ValueError(f"attention_backend must be 'auto', 'torch' or 'triton', got {name!r}")
