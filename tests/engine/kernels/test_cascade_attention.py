"""Cascade decode (shared prefix read once) equals plain paged decode."""

from __future__ import annotations

import torch

from radixgate.engine.kernels.cascade_attention import CascadePlan, cascade_decode_attention_torch
from radixgate.engine.kernels.decode_attention import decode_attention_torch


def test_cascade_matches_plain_decode_with_gqa_and_ungrouped_requests():
    g = torch.Generator().manual_seed(0)
    num_slots, num_kv_heads, head_dim, num_heads = 512, 2, 16, 8
    k_cache = torch.randn(num_slots, num_kv_heads, head_dim, generator=g)
    v_cache = torch.randn(num_slots, num_kv_heads, head_dim, generator=g)
    perm = torch.randperm(num_slots, generator=g)
    shared_a, shared_b = perm[:100], perm[100:140]
    own = [perm[140 + 20 * i : 140 + 20 * i + 3 + i] for i in range(6)]
    # requests 0-2 share prefix a, 3-4 share prefix b, 5 shares nothing
    full = (
        [torch.cat([shared_a, own[i]]) for i in range(3)] + [torch.cat([shared_b, own[i]]) for i in (3, 4)] + [own[5]]
    )
    indptr = torch.tensor([0] + [len(x) for x in full]).cumsum(0)
    q = torch.randn(6, num_heads, head_dim, generator=g)
    ref = decode_attention_torch(q, k_cache, v_cache, indptr, torch.cat(full), 0.25)
    suffixes = [own[i] for i in range(6)]
    plan = CascadePlan(
        groups=[(shared_a, torch.tensor([0, 1, 2])), (shared_b, torch.tensor([3, 4]))],
        suffix_indptr=torch.tensor([0] + [len(x) for x in suffixes]).cumsum(0),
        suffix_indices=torch.cat(suffixes),
    )
    out = cascade_decode_attention_torch(q, k_cache, v_cache, plan, 0.25)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
