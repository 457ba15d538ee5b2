"""Extend (prefill with a cached prefix) attention over a ragged batch.

The new tokens' K/V are already stored in the pool; request b's KV is its cached prefix followed
by its new tokens, and new token i may attend to every KV position <= prefix_len_b + i."""
import torch
import torch.nn.functional as F


def extend_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                           sm_scale: float, k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """q: [num_new_tokens, num_heads, head_dim] -> o: same shape."""
    out = torch.empty_like(q)
    qo = qo_indptr.tolist()
    kv = kv_indptr.tolist()
    for b in range(len(qo) - 1):
        q_len, kv_len = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
        if q_len == 0:
            continue
        slots = kv_indices[kv[b]:kv[b + 1]]
        k = (k_cache[slots].to(q.dtype) * k_scale).transpose(0, 1)          # [Hkv, L, D]
        v = (v_cache[slots].to(q.dtype) * v_scale).transpose(0, 1)
        qb = q[qo[b]:qo[b + 1]].transpose(0, 1)                             # [H, Q, D]
        prefix_len = kv_len - q_len
        mask = (torch.arange(kv_len, device=q.device)[None, :]
                <= prefix_len + torch.arange(q_len, device=q.device)[:, None])
        ob = F.scaled_dot_product_attention(qb, k, v, attn_mask=mask, scale=sm_scale, enable_gqa=True)
        out[qo[b]:qo[b + 1]] = ob.transpose(0, 1)
    return out


extend_attention = extend_attention_torch
