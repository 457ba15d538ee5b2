"""Decode attention: one query token per request over its paged KV.

The Triton version splits each request's KV into `num_kv_splits` contiguous ranges so that a
small batch with long contexts still fills the GPU (flash-decoding). Pass 1 computes, per
(request, KV head, split), the softmax-normalized partial output of the group of query heads
sharing that KV head, with its log-sum-exp; pass 2 merges the splits by their log-sum-exp.
K and V are read once per KV head, not once per query head (GQA).
"""

import torch

from radixgate.engine.kernels.store_kv import read_slots
from radixgate.engine.kernels.triton_runtime import dot_operands, for_device, next_power_of_2, tl, triton

MAX_KV_SPLITS = 16
_num_sms: dict[int, int] = {}


@triton.jit
def _decode_split_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    mid_o_ptr,
    mid_lse_ptr,
    qk_scale,
    stride_qb,
    stride_qh,
    stride_kn,
    stride_kh,
    stride_vn,
    stride_vh,
    stride_mob,
    stride_moh,
    stride_mos,
    stride_mlb,
    stride_mlh,
    GROUP_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    kv_start = tl.load(kv_indptr_ptr + b)
    kv_len = tl.load(kv_indptr_ptr + b + 1) - kv_start
    split_len = tl.cdiv(kv_len, NUM_SPLITS)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, kv_len)

    offs_g = tl.arange(0, BLOCK_H)
    offs_h = kv_head * GROUP_SIZE + offs_g  # the query heads that share this KV head
    mask_h = offs_g < GROUP_SIZE
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    # q: [BLOCK_H, BLOCK_D]; padded head rows are 0 and never stored.
    q = tl.load(
        q_ptr + b * stride_qb + offs_h[:, None] * stride_qh + offs_d[None, :],
        mask=mask_h[:, None] & mask_d[None, :],
        other=0.0,
    ).to(DOT_DTYPE)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask_n = offs_n < hi
        slots = tl.load(kv_indices_ptr + kv_start + offs_n, mask=mask_n, other=0)
        mask_kv = mask_n[:, None] & mask_d[None, :]
        # k, v: [BLOCK_N, BLOCK_D], dequantized to q's dtype (exact for FP8); scales applied in float32.
        k = tl.load(
            k_cache_ptr + slots[:, None] * stride_kn + kv_head * stride_kh + offs_d[None, :], mask=mask_kv, other=0.0
        ).to(DOT_DTYPE)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [BLOCK_H, BLOCK_N]
        qk = tl.where(mask_n[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_cache_ptr + slots[:, None] * stride_vn + kv_head * stride_vh + offs_d[None, :], mask=mask_kv, other=0.0
        ).to(DOT_DTYPE)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v, input_precision=DOT_PRECISION)
        m_i = m_new

    # An empty split (more splits than tokens) stores o = 0 with lse = -inf, which pass 2 weighs 0.
    lse = tl.where(l_i > 0, m_i + tl.log(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        mid_o_ptr + b * stride_mob + offs_h[:, None] * stride_moh + split * stride_mos + offs_d[None, :],
        o,
        mask=mask_h[:, None] & mask_d[None, :],
    )
    tl.store(mid_lse_ptr + b * stride_mlb + offs_h * stride_mlh + split, lse, mask=mask_h)


@triton.jit
def _decode_merge_kernel(
    mid_o_ptr,
    mid_lse_ptr,
    o_ptr,
    v_scale,
    stride_mob,
    stride_moh,
    stride_mos,
    stride_mlb,
    stride_mlh,
    stride_ob,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    mask_s = offs_s < NUM_SPLITS
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    lse = tl.load(mid_lse_ptr + b * stride_mlb + head * stride_mlh + offs_s, mask=mask_s, other=float("-inf"))
    # Split 0 always holds at least one token, so the max is finite.
    w = tl.exp(lse - tl.max(lse, 0))  # [BLOCK_S]
    o = tl.load(
        mid_o_ptr + b * stride_mob + head * stride_moh + offs_s[:, None] * stride_mos + offs_d[None, :],
        mask=mask_s[:, None] & mask_d[None, :],
        other=0.0,
    )  # [BLOCK_S, BLOCK_D]
    out = tl.sum(w[:, None] * o, 0) / tl.sum(w, 0) * v_scale
    tl.store(o_ptr + b * stride_ob + head * stride_oh + offs_d, out.to(o_ptr.dtype.element_ty), mask=mask_d)


def default_num_kv_splits(batch: int, num_kv_heads: int, device: torch.device) -> int:
    """Enough splits for about four programs per SM, without reading the KV lengths (no sync)."""
    if device.type != "cuda":
        return 2
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _num_sms:
        _num_sms[index] = torch.cuda.get_device_properties(index).multi_processor_count
    want = -(-4 * _num_sms[index] // (batch * num_kv_heads))
    return max(1, min(MAX_KV_SPLITS, want))


def decode_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    out: torch.Tensor | None = None,
    *,
    num_kv_splits: int | None = None,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 2,
) -> torch.Tensor:
    """Same contract as `decode_attention_torch`; every request must have at least one KV token."""
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    assert k_cache.shape == v_cache.shape and k_cache.dtype == v_cache.dtype
    assert k_cache.shape[2] == head_dim, f"head_dim {head_dim} != pool's {k_cache.shape[2]}"
    assert num_heads % num_kv_heads == 0, f"{num_heads} query heads over {num_kv_heads} KV heads"
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    assert kv_indptr.dtype == torch.int64 and kv_indices.dtype == torch.int64
    assert kv_indptr.shape == (batch + 1,) and kv_indptr.is_contiguous() and kv_indices.is_contiguous()
    assert q.device == k_cache.device == kv_indptr.device == kv_indices.device
    out = torch.empty_like(q) if out is None else out
    assert out.shape == q.shape and out.stride(-1) == 1
    if batch == 0:
        return out
    splits = num_kv_splits or default_num_kv_splits(batch, num_kv_heads, q.device)
    assert 1 <= splits <= 256
    dot_dtype, precision = dot_operands(q.dtype, q.device)
    group = num_heads // num_kv_heads
    block_d = max(16, next_power_of_2(head_dim))
    # Partial results per split: o normalized within the split, lse its log-sum-exp.
    mid_o = torch.empty((batch, num_heads, splits, head_dim), dtype=torch.float32, device=q.device)
    mid_lse = torch.empty((batch, num_heads, splits), dtype=torch.float32, device=q.device)
    for_device(_decode_split_kernel, q.device)[(batch, num_kv_heads, splits)](
        q,
        k_cache,
        v_cache,
        kv_indptr,
        kv_indices,
        mid_o,
        mid_lse,
        float(sm_scale) * float(k_scale),
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        v_cache.stride(0),
        v_cache.stride(1),
        mid_o.stride(0),
        mid_o.stride(1),
        mid_o.stride(2),
        mid_lse.stride(0),
        mid_lse.stride(1),
        GROUP_SIZE=group,
        HEAD_DIM=head_dim,
        NUM_SPLITS=splits,
        BLOCK_H=max(16, next_power_of_2(group)),
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        DOT_DTYPE=dot_dtype,
        DOT_PRECISION=precision,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    for_device(_decode_merge_kernel, q.device)[(batch, num_heads)](
        mid_o,
        mid_lse,
        out,
        float(v_scale),
        mid_o.stride(0),
        mid_o.stride(1),
        mid_o.stride(2),
        mid_lse.stride(0),
        mid_lse.stride(1),
        out.stride(0),
        out.stride(1),
        HEAD_DIM=head_dim,
        NUM_SPLITS=splits,
        BLOCK_S=next_power_of_2(splits),
        BLOCK_D=block_d,
    )
    return out


def decode_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    out: torch.Tensor | None = None,
    plan: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """q: [batch, num_heads, head_dim] -> o: [batch, num_heads, head_dim] (written into `out` if given).

    K/V are dequantized as cache value * scale. Vectorized over the batch by padding every request
    to the longest KV length (`plan`: `padded_plan` of the indices, built here if not given). One
    pair of batched products per KV head reads the gathered K/V in place (no transposed copies);
    the padding is masked by an additive -inf bias."""
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    out = torch.empty_like(q) if out is None else out
    if batch == 0:
        return out
    slots, bias = padded_plan(kv_indptr, kv_indices) if plan is None else plan
    k, v = read_slots(k_cache, slots), read_slots(v_cache, slots)  # [B, L, Hkv, D]
    if k_scale != 1.0 or v_scale != 1.0 or k.dtype != q.dtype:
        k = (k.to(torch.float32) * k_scale).to(q.dtype)
        v = (v.to(torch.float32) * v_scale).to(q.dtype)
    qg = q.view(batch, num_kv_heads, num_heads // num_kv_heads, head_dim)
    og = out.view(batch, num_kv_heads, num_heads // num_kv_heads, head_dim)
    bias = bias.to(q.dtype)  # once per layer, not once per head
    for h in range(num_kv_heads):
        scores = torch.baddbmm(bias, qg[:, h], k[:, :, h].transpose(1, 2), alpha=sm_scale)  # [B, G, L]
        # padded columns have probability exactly 0 and read request 0's first slot, a written one
        og[:, h] = torch.bmm(torch.softmax(scores, dim=-1), v[:, :, h])
    return out


def padded_plan(kv_indptr: torch.Tensor, kv_indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """-> slots [B, L] (padding: kv_indices[0]) and the additive mask [B, 1, L] (0 or -inf, float32).
    The same for every layer of a step: the torch backend builds it once per step (ForwardContext)."""
    kv_lens = kv_indptr[1:] - kv_indptr[:-1]
    pos = torch.arange(int(kv_lens.max()), device=kv_indptr.device)
    valid = pos[None, :] < kv_lens[:, None]  # [B, L]
    gather = torch.where(valid, kv_indptr[:-1, None] + pos[None, :], 0)
    slots = read_slots(kv_indices, gather.clamp(max=max(kv_indices.numel() - 1, 0)))
    bias = torch.zeros(valid.shape, dtype=torch.float32, device=valid.device).masked_fill_(~valid, float("-inf"))
    return slots, bias.unsqueeze(1)


decode_attention = decode_attention_torch
