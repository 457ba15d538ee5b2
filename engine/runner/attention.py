"""Attention backends: how a layer's attention reads and writes the paged KV pool.

A backend stores the step's new K/V at `ctx.out_slots` (quantized if the pool is FP8), then
attends over each request's KV through the slot layout documented in `kernels/__init__.py`,
dequantizing with the layer's scales. Two implementations share that code and differ only in
their kernels, which share signatures: torch (any device, the reference) and Triton (compiled
on CUDA; on CPU it runs under Triton's interpreter, which is slow and meant for tests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..kernels.cascade_attention import CascadePlan, cascade_decode_attention_torch
from ..kernels.decode_attention import decode_attention_torch, decode_attention_triton, padded_plan
from ..kernels.extend_attention import extend_attention_torch, extend_attention_triton
from ..kernels.store_kv import store_kv_torch, store_kv_triton
from ..kernels.triton_runtime import HAS_TRITON, require_triton
from ..kvcache.kv_pool import KVPool


@dataclass
class ForwardContext:
    """Per-step metadata shared by every layer."""

    backend: AttentionBackend
    is_decode: bool
    out_slots: torch.Tensor  # [T] slots receiving this step's new K/V
    qo_indptr: torch.Tensor  # [B+1] rows of q per request
    kv_indptr: torch.Tensor  # [B+1]
    kv_indices: torch.Tensor  # [total_kv] slots of each request's whole KV, new tokens included
    max_q_len: int | None = None  # longest new-token run (extend); read from qo_indptr once per step if None
    cascade: CascadePlan | None = None  # decode: prefixes shared by several requests, read once
    padded_plan: Any = None  # torch decode: built by the first layer, read by the others


class AttentionBackend:
    """One set of kernels over the pool; subclasses name the set."""

    name: ClassVar[str]
    store_kv: ClassVar[Callable[..., None]]
    decode_attention: ClassVar[Callable[..., torch.Tensor]]
    extend_attention: ClassVar[Callable[..., torch.Tensor]]
    cascade_decode_attention: ClassVar[Callable[..., torch.Tensor] | None] = None

    def __init__(self, pool: KVPool):
        self.pool = pool

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, sm_scale: float, ctx: ForwardContext
    ) -> torch.Tensor:
        # q: [T, H, D]; k, v: [T, Hkv, D]
        pool = self.pool
        pool.calibrate_scales(layer_id, k, v)
        k_cache, v_cache = pool.k_buffers[layer_id], pool.v_buffers[layer_id]
        k_scale, v_scale = pool.k_scales[layer_id], pool.v_scales[layer_id]
        self.store_kv(k_cache, v_cache, k, v, ctx.out_slots, k_scale, v_scale)
        if ctx.is_decode and ctx.cascade is not None:
            assert self.cascade_decode_attention is not None, "a cascade plan on a backend without cascade decode"
            return self.cascade_decode_attention(q, k_cache, v_cache, ctx.cascade, sm_scale, k_scale, v_scale)
        if ctx.is_decode:
            return self._decode(q, k_cache, v_cache, sm_scale, k_scale, v_scale, ctx)
        if ctx.max_q_len is None:  # one device sync per step, shared by every layer
            ctx.max_q_len = int((ctx.qo_indptr[1:] - ctx.qo_indptr[:-1]).max()) if ctx.qo_indptr.numel() > 1 else 0
        return self.extend_attention(
            q,
            k_cache,
            v_cache,
            ctx.qo_indptr,
            ctx.kv_indptr,
            ctx.kv_indices,
            sm_scale,
            k_scale,
            v_scale,
            max_q_len=ctx.max_q_len,
        )

    def _decode(self, q, k_cache, v_cache, sm_scale: float, k_scale: float, v_scale: float, ctx) -> torch.Tensor:
        return self.decode_attention(q, k_cache, v_cache, ctx.kv_indptr, ctx.kv_indices, sm_scale, k_scale, v_scale)


class TorchBackend(AttentionBackend):
    name = "torch"
    store_kv = staticmethod(store_kv_torch)
    decode_attention = staticmethod(decode_attention_torch)
    extend_attention = staticmethod(extend_attention_torch)
    cascade_decode_attention = staticmethod(cascade_decode_attention_torch)

    def _decode(self, q, k_cache, v_cache, sm_scale: float, k_scale: float, v_scale: float, ctx) -> torch.Tensor:
        if ctx.padded_plan is None:  # the first layer of the step
            ctx.padded_plan = padded_plan(ctx.kv_indptr, ctx.kv_indices)
        kv = (ctx.kv_indptr, ctx.kv_indices)
        return decode_attention_torch(q, k_cache, v_cache, *kv, sm_scale, k_scale, v_scale, plan=ctx.padded_plan)


class TritonBackend(AttentionBackend):
    name = "triton"
    store_kv = staticmethod(store_kv_triton)
    decode_attention = staticmethod(decode_attention_triton)
    extend_attention = staticmethod(extend_attention_triton)


def create_backend(name: str, pool: KVPool) -> AttentionBackend:
    """ "auto" is Triton on CUDA (when installed and able to read the pool's dtype) and torch
    elsewhere; "torch" and "triton" force one."""
    if name not in ("auto", "torch", "triton"):
        raise ValueError(f"attention_backend must be 'auto', 'torch' or 'triton', got {name!r}")
    triton_problem = _triton_problem(pool)
    if name == "auto":
        name = "torch" if triton_problem else "triton"
    if name == "triton":
        if triton_problem and pool.device.type == "cuda":
            raise ValueError(f"attention_backend='triton' cannot run here: {triton_problem}")
        require_triton()
        return TritonBackend(pool)
    return TorchBackend(pool)


def _triton_problem(pool: KVPool) -> str | None:
    """Why "auto" should not pick Triton for this pool, or None."""
    if pool.device.type != "cuda":
        return "not a CUDA device"
    if not HAS_TRITON:
        return "triton is not installed"
    if pool.dtype == torch.float8_e4m3fn and torch.cuda.get_device_capability(pool.device) < (8, 9):
        return (
            "Triton supports fp8_e4m3 only on compute capability 8.9 and newer (Ada, Hopper); "
            "use kv_cache_dtype='fp8_e5m2' or attention_backend='torch'"
        )
    return None
