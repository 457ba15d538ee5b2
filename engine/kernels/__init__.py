"""Attention kernels over the paged KV pool.

Each kernel file holds three things side by side: the Triton kernel, a launcher that checks
layouts, and a plain-torch reference with the same signature (used on CPU and by the tests).

Slot layout shared by every kernel:
  k_cache, v_cache: [num_slots, num_kv_heads, head_dim]   (one layer of the pool)
  kv_indptr:        [batch + 1] int64, request b's KV slots are kv_indices[kv_indptr[b]:kv_indptr[b+1]]
  kv_indices:       [total_kv] int64 slot ids, in token order
  qo_indptr:        [batch + 1] int64, request b's new tokens are rows qo_indptr[b]:qo_indptr[b+1] of q

An FP8 pool holds K / k_scale and V / v_scale (one scale pair per layer); every kernel takes the
scales and dequantizes inside attention. See docs/kernels.md.
"""
