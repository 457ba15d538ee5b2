"""Decode attention: one query token per request over its paged KV."""
import torch


def decode_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float,
                           k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """q: [batch, num_heads, head_dim] -> o: [batch, num_heads, head_dim].

    Vectorized over the batch by padding every request to the longest KV length."""
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    kv_lens = kv_indptr[1:] - kv_indptr[:-1]
    max_len = int(kv_lens.max())
    pos = torch.arange(max_len, device=q.device)
    valid = pos[None, :] < kv_lens[:, None]                                   # [B, L]
    gather = torch.where(valid, kv_indptr[:-1, None] + pos[None, :], 0)
    slots = kv_indices[gather.clamp(max=max(kv_indices.numel() - 1, 0))]      # [B, L]
    k = k_cache[slots].to(q.dtype) * k_scale                                  # [B, L, Hkv, D]
    v = v_cache[slots].to(q.dtype) * v_scale
    group = num_heads // num_kv_heads
    qg = q.view(batch, num_kv_heads, group, head_dim)
    scores = torch.einsum("bhgd,blhd->bhgl", qg, k) * sm_scale                # [B, Hkv, G, L]
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("bhgl,blhd->bhgd", probs, v)
    return out.reshape(batch, num_heads, head_dim)


decode_attention = decode_attention_torch
