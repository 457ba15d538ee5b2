"""Extend (prefill with a cached prefix) attention over a ragged batch.

The new tokens' K/V are already stored in the pool; request b's KV is its cached prefix followed
by its new tokens, and new token i may attend to every KV position <= prefix_len_b + i.

The Triton version runs one program per (request, query head, block of BLOCK_M new tokens); it
streams the request's KV from the pool through `kv_indices` with an online softmax and stops at
the block's causal limit. A query head reads the K/V of its KV head (GQA).
"""

import torch
import torch.nn.functional as F

from radixgate.engine.kernels.decode_attention import decode_attention_torch
from radixgate.engine.kernels.store_kv import read_slots
from radixgate.engine.kernels.triton_runtime import dot_operands, for_device, next_power_of_2, tl, triton


@triton.jit
def _extend_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    o_ptr,
    qo_indptr_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    qk_scale,
    v_scale,
    stride_qt,
    stride_qh,
    stride_kn,
    stride_kh,
    stride_vn,
    stride_vh,
    stride_ot,
    stride_oh,
    GROUP_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    b = tl.program_id(0)
    head = tl.program_id(1)
    m_block = tl.program_id(2)
    kv_head = head // GROUP_SIZE
    q_start = tl.load(qo_indptr_ptr + b)
    q_len = tl.load(qo_indptr_ptr + b + 1) - q_start
    kv_start = tl.load(kv_indptr_ptr + b)
    kv_len = tl.load(kv_indptr_ptr + b + 1) - kv_start
    prefix_len = kv_len - q_len

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)  # new-token index within the request
    mask_m = offs_m < q_len
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    q = tl.load(
        q_ptr + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
        mask=mask_m[:, None] & mask_d[None, :],
        other=0.0,
    ).to(DOT_DTYPE)  # [BLOCK_M, BLOCK_D]

    # The block's last row sees KV positions < prefix_len + (m_block + 1) * BLOCK_M; a block past
    # the request's new tokens (the grid covers the longest request) does no work and stores nothing.
    kv_end = tl.minimum(kv_len, prefix_len + (m_block + 1) * BLOCK_M)
    kv_end = tl.where(m_block * BLOCK_M < q_len, kv_end, 0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(0, kv_end, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask_n = offs_n < kv_end
        slots = tl.load(kv_indices_ptr + kv_start + offs_n, mask=mask_n, other=0)
        mask_kv = mask_n[:, None] & mask_d[None, :]
        k = tl.load(
            k_cache_ptr + slots[:, None] * stride_kn + kv_head * stride_kh + offs_d[None, :], mask=mask_kv, other=0.0
        ).to(DOT_DTYPE)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [BLOCK_M, BLOCK_N]
        # KV position 0 is visible to every row, so each row's running max is finite after block 0.
        visible = mask_n[None, :] & (offs_n[None, :] <= prefix_len + offs_m[:, None])
        qk = tl.where(visible, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_cache_ptr + slots[:, None] * stride_vn + kv_head * stride_vh + offs_d[None, :], mask=mask_kv, other=0.0
        ).to(DOT_DTYPE)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v, input_precision=DOT_PRECISION)
        m_i = m_new

    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None] * v_scale
    tl.store(
        o_ptr + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
        o.to(o_ptr.dtype.element_ty),
        mask=mask_m[:, None] & mask_d[None, :],
    )


def extend_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    out: torch.Tensor | None = None,
    *,
    max_q_len: int | None = None,
    block_m: int = 64,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 2,
) -> torch.Tensor:
    """Same contract as `extend_attention_torch`. Without `max_q_len` (the most new tokens of
    any request) it reads that from the device and checks every request's KV covers its new
    tokens: one sync per call, which a caller running many layers avoids by passing it."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    batch = qo_indptr.numel() - 1
    assert k_cache.shape == v_cache.shape and k_cache.dtype == v_cache.dtype
    assert k_cache.shape[2] == head_dim, f"head_dim {head_dim} != pool's {k_cache.shape[2]}"
    assert num_heads % num_kv_heads == 0, f"{num_heads} query heads over {num_kv_heads} KV heads"
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    for t in (qo_indptr, kv_indptr, kv_indices):
        assert t.dtype == torch.int64 and t.is_contiguous() and t.device == q.device
    assert kv_indptr.shape == (batch + 1,)
    out = torch.empty_like(q) if out is None else out
    assert out.shape == q.shape and out.stride(-1) == 1
    if batch == 0 or num_tokens == 0:
        return out
    if max_q_len is None:
        q_lens = qo_indptr[1:] - qo_indptr[:-1]
        max_q_len, min_prefix = torch.stack([q_lens.max(), (kv_indptr[1:] - kv_indptr[:-1] - q_lens).min()]).tolist()
        assert min_prefix >= 0, "every request's KV must include its new tokens"
    if max_q_len == 0:
        return out
    dot_dtype, precision = dot_operands(q.dtype, q.device)
    block_d = max(16, next_power_of_2(head_dim))
    grid = (batch, num_heads, -(-max_q_len // block_m))
    for_device(_extend_kernel, q.device)[grid](
        q,
        k_cache,
        v_cache,
        out,
        qo_indptr,
        kv_indptr,
        kv_indices,
        float(sm_scale) * float(k_scale),
        float(v_scale),
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        v_cache.stride(0),
        v_cache.stride(1),
        out.stride(0),
        out.stride(1),
        GROUP_SIZE=num_heads // num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        DOT_DTYPE=dot_dtype,
        DOT_PRECISION=precision,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out


def extend_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    out: torch.Tensor | None = None,
    *,
    max_q_len: int | None = None,
) -> torch.Tensor:
    """q: [num_new_tokens, num_heads, head_dim] -> o: same shape (written into `out` if given).

    K/V are dequantized as cache value * scale. `max_q_len` is a launch hint for the Triton
    version, unused here. On CPU this runs torch's flash-attention kernel, which never holds a
    whole score matrix: each request's new tokens attend causally among themselves (requests of
    similar length batched, right-padded, in one call) and, separately, to their cached prefix
    (no mask needed); the two partial results merge through their log-sum-exp."""
    out = torch.empty_like(q) if out is None else out
    if q.device.type != "cpu" or _flash_cpu is None:
        return extend_attention_masked(
            q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale, k_scale, v_scale, out
        )
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[1]
    group = num_heads // num_kv_heads
    qo, kv = qo_indptr.tolist(), kv_indptr.tolist()
    k_all = _dequantize(read_slots(k_cache, kv_indices), k_scale, q.dtype)  # [total_kv, Hkv, D]
    v_all = _dequantize(read_slots(v_cache, kv_indices), v_scale, q.dtype)
    reqs = [b for b in range(len(qo) - 1) if qo[b + 1] > qo[b]]
    # one-token rows after a prefix (the decodes of a mixed batch): one batched decode-attention call
    singles = [b for b in reqs if qo[b + 1] - qo[b] == 1 and kv[b + 1] - kv[b] > 1]
    if len(singles) > 1:
        rows = torch.tensor([qo[b] for b in singles], device=q.device)
        lens = torch.tensor([kv[b + 1] - kv[b] for b in singles], device=q.device)
        indptr = torch.zeros(len(singles) + 1, dtype=torch.int64, device=q.device)
        indptr[1:] = lens.cumsum(0)
        indices = torch.cat([kv_indices[kv[b] : kv[b + 1]] for b in singles])
        out[rows] = decode_attention_torch(q[rows], k_cache, v_cache, indptr, indices, sm_scale, k_scale, v_scale)
        done = set(singles)
        reqs = [b for b in reqs if b not in done]
    # the new tokens among themselves, causal: [H, q_len, D] per request, with its log-sum-exp [H, q_len]
    for members in _similar_lengths(reqs, [qo[b + 1] - qo[b] for b in range(len(qo) - 1)]):
        q_len = max(qo[b + 1] - qo[b] for b in members)
        qs, ks, vs = [], [], []
        for b in members:
            new_kv = slice(kv[b + 1] - (qo[b + 1] - qo[b]), kv[b + 1])
            qs.append(_pad_rows(q[qo[b] : qo[b + 1]], q_len))
            ks.append(_pad_rows(k_all[new_kv], q_len))
            vs.append(_pad_rows(v_all[new_kv], q_len))
        qb = torch.stack(qs).transpose(1, 2)  # [n, H, q_len, D]
        kb = torch.stack(ks).repeat_interleave(group, dim=2).transpose(1, 2)
        vb = torch.stack(vs).repeat_interleave(group, dim=2).transpose(1, 2)
        o, lse = _flash_cpu(qb, kb, vb, 0.0, True, scale=sm_scale)
        for i, b in enumerate(members):
            n = qo[b + 1] - qo[b]
            prefix_len = kv[b + 1] - kv[b] - n
            if prefix_len == 0:
                out[qo[b] : qo[b + 1]] = o[i, :, :n].transpose(0, 1)
                continue
            prefix = slice(kv[b], kv[b] + prefix_len)
            op, lsep = _attend_prefix(q[qo[b] : qo[b + 1]], k_all[prefix], v_all[prefix], group, sm_scale)
            total = torch.logaddexp(lse[i, :, :n], lsep)  # [H, n]
            merged = o[i, :, :n] * torch.exp(lse[i, :, :n] - total)[..., None] + op * torch.exp(lsep - total)[..., None]
            out[qo[b] : qo[b + 1]] = merged.transpose(0, 1)
    return out


def _attend_prefix(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: int, sm_scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """q: [n, H, D] new tokens; k, v: [P, Hkv, D] the cached prefix, fully visible to every new token.
    Returns (o [H, n, D], lse [H, n]). The G query heads of a KV head go in as rows of one matrix,
    so the prefix is read once per KV head (no repeat for GQA)."""
    assert _flash_cpu is not None  # callers check
    n, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    qg = q.view(n, num_kv_heads, group, head_dim).permute(1, 2, 0, 3).reshape(1, num_kv_heads, group * n, head_dim)
    o, lse = _flash_cpu(qg, k.transpose(0, 1)[None], v.transpose(0, 1)[None], 0.0, False, scale=sm_scale)
    return o.reshape(num_heads, n, head_dim), lse.reshape(num_heads, n)


def _similar_lengths(reqs: list[int], lengths: list[int]) -> list[list[int]]:
    """Groups requests whose lengths are within 3/4 of the group's longest, so right-padding a group
    to its longest costs little."""
    groups: list[list[int]] = []
    for b in sorted(reqs, key=lambda b: -lengths[b]):
        if groups and 4 * lengths[b] >= 3 * lengths[groups[-1][0]]:
            groups[-1].append(b)
        else:
            groups.append([b])
    return groups


def _pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    return x if x.shape[0] == rows else F.pad(x, (0, 0, 0, 0, 0, rows - x.shape[0]))


def _dequantize(x: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    if scale == 1.0 and x.dtype == dtype:
        return x
    return (x.to(torch.float32) * scale).to(dtype)


# torch's CPU flash-attention kernel, which also returns the log-sum-exp the prefix merge needs.
_flash_cpu = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def extend_attention_masked(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The plain reference (any device): one masked SDPA per request, score matrices materialised."""
    out = torch.empty_like(q) if out is None else out
    qo = qo_indptr.tolist()
    kv = kv_indptr.tolist()
    for b in range(len(qo) - 1):
        q_len, kv_len = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
        if q_len == 0:
            continue
        slots = kv_indices[kv[b] : kv[b + 1]]
        k = (read_slots(k_cache, slots).to(torch.float32) * k_scale).to(q.dtype).transpose(0, 1)  # [Hkv, L, D]
        v = (read_slots(v_cache, slots).to(torch.float32) * v_scale).to(q.dtype).transpose(0, 1)
        qb = q[qo[b] : qo[b + 1]].transpose(0, 1)  # [H, Q, D]
        prefix_len = kv_len - q_len
        mask = (
            torch.arange(kv_len, device=q.device)[None, :] <= prefix_len + torch.arange(q_len, device=q.device)[:, None]
        )
        ob = F.scaled_dot_product_attention(qb, k, v, attn_mask=mask, scale=sm_scale, enable_gqa=True)
        out[qo[b] : qo[b + 1]] = ob.transpose(0, 1)
    return out


extend_attention = extend_attention_torch
