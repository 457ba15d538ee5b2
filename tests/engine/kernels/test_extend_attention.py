"""Triton extend attention against the torch reference: cached prefix from the pool, new tokens causal."""

import math

import pytest
import torch
from paged_batch import make_paged_batch, max_rel_err

from radixgate.engine.kernels.decode_attention import decode_attention_torch
from radixgate.engine.kernels.extend_attention import extend_attention_masked, extend_attention_torch
from radixgate.engine.kernels.extend_attention import extend_attention_triton as triton_kernel
from radixgate.engine.kernels.triton_runtime import HAS_TRITON

needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")

# Request 1 is request 0's first 16 tokens (a radix hit) plus its own; request 2 has no new tokens.
KV_LENS = [37, 21, 5, 40]
Q_LENS = [5, 21, 0, 18]
NUM_KV_HEADS = 2


def _inputs(device, group, page_size, dtype=torch.float32, kv_dtype=None, head_dim=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    batch = make_paged_batch(
        KV_LENS, NUM_KV_HEADS, head_dim, page_size, kv_dtype or dtype, device, gen, share_prefix=16, scale=0.02
    )
    q = torch.randn((sum(Q_LENS), NUM_KV_HEADS * group, head_dim), generator=gen).to(dtype).to(device)
    qo_indptr = torch.tensor([0] + torch.tensor(Q_LENS).cumsum(0).tolist(), dtype=torch.int64, device=device)
    return (
        q,
        batch.k_cache,
        batch.v_cache,
        qo_indptr,
        batch.kv_indptr,
        batch.kv_indices,
        1 / math.sqrt(head_dim),
        batch.k_scale,
        batch.v_scale,
    )


def _run(device, group, page_size, dtype=torch.float32, kv_dtype=None, head_dim=32, **kernel_kw):
    args = _inputs(device, group, page_size, dtype, kv_dtype, head_dim)
    ref = extend_attention_torch(*args)
    out = torch.full_like(args[0], float("nan"))  # an element the kernel leaves unwritten fails
    got = triton_kernel(*args, out=out, **kernel_kw)
    assert got is out
    return got, ref


@needs_triton
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("group", [1, 4, 7])
@pytest.mark.parametrize("block", [16, 64])
def test_extend_matches_reference_float32(device, group, page_size, block):
    got, ref = _run(device, group, page_size, block_m=block, block_n=block)
    assert torch.isfinite(ref).all()
    err = max_rel_err(got, ref)
    print(f"max rel err {err:.2e}")  # shown by pytest -rP
    assert err <= 1e-5


@needs_triton
@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_extend_dequantizes_fp8_like_reference(device, kv_dtype):
    got, ref = _run(
        device, group=4, page_size=16, kv_dtype=kv_dtype, block_m=16, block_n=16, max_q_len=max(Q_LENS)
    )  # the hint the engine passes, saving a sync per layer
    err = max_rel_err(got, ref)
    print(f"max rel err {err:.2e}")  # shown by pytest -rP
    assert err <= 1e-5


@needs_triton
def test_extend_bfloat16_non_power_of_two_head_dim(device):
    got, ref = _run(device, group=7, page_size=1, dtype=torch.bfloat16, head_dim=24, block_m=16, block_n=32)
    err = max_rel_err(got, ref)
    print(f"max rel err {err:.2e}")
    assert err <= 2e-2


def test_extend_last_token_equals_decode():
    """The references agree: a new token's extend output is decode attention over the same KV."""
    q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale, _, _ = _inputs(torch.device("cpu"), 4, 16)
    ext = extend_attention_torch(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale)
    with_new = [b for b in range(len(Q_LENS)) if Q_LENS[b] > 0]
    last_rows = torch.tensor([int(qo_indptr[b + 1]) - 1 for b in with_new])
    dec_indptr = torch.tensor([0] + torch.tensor([KV_LENS[b] for b in with_new]).cumsum(0).tolist())
    dec_indices = torch.cat([kv_indices[kv_indptr[b] : kv_indptr[b + 1]] for b in with_new])
    dec = decode_attention_torch(q[last_rows], k_cache, v_cache, dec_indptr, dec_indices, sm_scale)
    assert max_rel_err(dec, ext[last_rows]) <= 1e-5


@pytest.mark.parametrize("group", [1, 4, 7])
@pytest.mark.parametrize(
    ("dtype", "kv_dtype", "tol"),
    [(torch.float32, None, 1e-5), (torch.bfloat16, None, 2e-2), (torch.float32, torch.float8_e5m2, 1e-5)],
)
def test_cpu_flash_path_matches_masked_reference(group, dtype, kv_dtype, tol):
    """The CPU path (flash kernel, new tokens batched by length, prefix merged by log-sum-exp) equals
    one masked SDPA per request: prefixes, no-prefix requests, an empty request, GQA, FP8 pools."""
    args = _inputs(torch.device("cpu"), group, 16, dtype, kv_dtype)
    got = extend_attention_torch(*args)
    ref = extend_attention_masked(*args)
    assert torch.isfinite(ref).all()
    assert max_rel_err(got, ref) <= tol


def test_mixed_batch_of_one_token_rows_and_a_prefill_chunk():
    """A mixed-chunk batch: a prefill chunk after its prefix, plus one-token decode rows (which take the
    batched decode path), equals the masked reference."""
    gen = torch.Generator().manual_seed(1)
    kv_lens, q_lens = [40, 23, 9, 31, 2], [12, 1, 1, 1, 1]
    batch = make_paged_batch(kv_lens, NUM_KV_HEADS, 32, 16, torch.float32, torch.device("cpu"), gen, scale=0.02)
    q = torch.randn((sum(q_lens), NUM_KV_HEADS * 4, 32), generator=gen)
    qo_indptr = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int64)
    args = (q, batch.k_cache, batch.v_cache, qo_indptr, batch.kv_indptr, batch.kv_indices, 32**-0.5)
    assert max_rel_err(extend_attention_torch(*args), extend_attention_masked(*args)) <= 1e-5
