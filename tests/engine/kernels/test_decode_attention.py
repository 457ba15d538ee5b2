"""Triton decode attention against the torch reference, on paged pools with poisoned free slots."""

import math

import pytest
import torch
from paged_batch import make_paged_batch, max_rel_err

from radixgate.engine.kernels.decode_attention import decode_attention_torch
from radixgate.engine.kernels.decode_attention import decode_attention_triton as triton_kernel
from radixgate.engine.kernels.triton_runtime import HAS_TRITON

needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")

KV_LENS = [37, 21, 1, 70]  # crosses 16-token pages; the 1-token request leaves splits empty
NUM_KV_HEADS = 2


def _run(device, group, page_size, dtype=torch.float32, kv_dtype=None, head_dim=32, seed=0, **kernel_kw):
    gen = torch.Generator().manual_seed(seed)
    batch = make_paged_batch(
        KV_LENS, NUM_KV_HEADS, head_dim, page_size, kv_dtype or dtype, device, gen, share_prefix=16, scale=0.02
    )
    q = torch.randn((len(KV_LENS), NUM_KV_HEADS * group, head_dim), generator=gen).to(dtype).to(device)
    args = (
        q,
        batch.k_cache,
        batch.v_cache,
        batch.kv_indptr,
        batch.kv_indices,
        1 / math.sqrt(head_dim),
        batch.k_scale,
        batch.v_scale,
    )
    ref = decode_attention_torch(*args)
    out = torch.full_like(q, float("nan"))  # an element the kernel leaves unwritten fails
    got = triton_kernel(*args, out=out, **kernel_kw)
    assert got is out
    return got, ref


@needs_triton
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("group", [1, 4, 7])
@pytest.mark.parametrize("splits,block_n", [(5, 64), (1, 16)])
def test_decode_matches_reference_float32(device, group, page_size, splits, block_n):
    got, ref = _run(device, group, page_size, num_kv_splits=splits, block_n=block_n)
    assert torch.isfinite(ref).all()
    err = max_rel_err(got, ref)
    print(f"max rel err {err:.2e}")  # shown by pytest -rP
    assert err <= 1e-5


@needs_triton
@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_decode_dequantizes_fp8_like_reference(device, kv_dtype):
    got, ref = _run(device, group=4, page_size=16, kv_dtype=kv_dtype, num_kv_splits=3)
    err = max_rel_err(got, ref)
    print(f"max rel err {err:.2e}")  # shown by pytest -rP
    assert err <= 1e-5


@needs_triton
def test_decode_bfloat16_non_power_of_two_head_dim(device):
    got, ref = _run(device, group=4, page_size=16, dtype=torch.bfloat16, head_dim=24, num_kv_splits=2)
    err = max_rel_err(got, ref)
    print(f"max rel err {err:.2e}")
    assert err <= 2e-2


@needs_triton
def test_decode_default_splits_and_empty_batch(device):
    got, ref = _run(device, group=1, page_size=1)
    err = max_rel_err(got, ref)
    print(f"max rel err {err:.2e}")  # shown by pytest -rP
    assert err <= 1e-5
    empty = torch.empty((0, 2, 32), device=device)
    pool = torch.zeros((4, 2, 32), device=device)
    indptr = torch.zeros(1, dtype=torch.int64, device=device)
    assert triton_kernel(empty, pool, pool, indptr, indptr[:0], 1.0).shape == (0, 2, 32)


def test_nan_output_never_passes():
    ref = torch.ones(4)
    assert not max_rel_err(torch.tensor([1.0, float("nan"), 1.0, 1.0]), ref) <= 1e-5


def test_reference_matches_naive_softmax_attention():
    gen = torch.Generator().manual_seed(1)
    batch = make_paged_batch([9, 3], 2, 8, 4, torch.float32, torch.device("cpu"), gen)
    q = torch.randn((2, 6, 8), generator=gen)
    out = decode_attention_torch(q, batch.k_cache, batch.v_cache, batch.kv_indptr, batch.kv_indices, 0.3)
    for b, (lo, hi) in enumerate([(0, 9), (9, 12)]):
        slots = batch.kv_indices[lo:hi]
        for h in range(6):
            k, v = batch.k_cache[slots, h // 3], batch.v_cache[slots, h // 3]
            expect = torch.softmax(k @ q[b, h] * 0.3, dim=0) @ v
            assert torch.allclose(out[b, h], expect, atol=1e-6)
