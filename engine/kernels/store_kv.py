"""Write new K/V rows into one layer of the pool at given slots."""
import torch


def store_kv_torch(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   slots: torch.Tensor, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
    """k, v: [num_tokens, num_kv_heads, head_dim]; slots: [num_tokens] int64.

    With a float pool the scales are ignored (they stay 1.0)."""
    if k_scale != 1.0 or v_scale != 1.0:
        k, v = k / k_scale, v / v_scale
    k_cache[slots] = k.to(k_cache.dtype)
    v_cache[slots] = v.to(v_cache.dtype)


store_kv = store_kv_torch
