"""Triton store_kv against the torch reference, FP8 quantization included."""

import pytest
import torch

from radixgate.engine.kernels.fp8 import SCALE_HEADROOM, quantize_fp8, scale_from_amax
from radixgate.engine.kernels.store_kv import store_kv_torch
from radixgate.engine.kernels.store_kv import store_kv_triton as triton_kernel
from radixgate.engine.kernels.triton_runtime import HAS_TRITON

needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")

NUM_SLOTS, NUM_KV_HEADS, HEAD_DIM = 48, 3, 24


def _poisoned_pool(dtype, device):
    return torch.full((NUM_SLOTS, NUM_KV_HEADS, HEAD_DIM), float("nan")).to(dtype).to(device)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal values, NaN (unwritten slots) equal to NaN."""
    return torch.equal(a.float().nan_to_num(123.0), b.float().nan_to_num(123.0)) and torch.equal(
        a.float().isnan(), b.float().isnan()
    )


@needs_triton
@pytest.mark.parametrize(
    "pool_dtype,scale",
    [(torch.float32, 1.0), (torch.float8_e4m3fn, 0.37), (torch.float8_e5m2, 0.37), (torch.float8_e4m3fn, 1.0)],
)
def test_store_matches_reference(device, pool_dtype, scale):
    gen = torch.Generator().manual_seed(0)
    num_tokens = 12
    # K and V are strided views of one fused buffer, as they come out of a QKV projection;
    # magnitudes span 1e-6 (FP8 subnormals and zero) to 1e3 (saturation).
    fused = torch.randn((num_tokens, 3, NUM_KV_HEADS, HEAD_DIM), generator=gen)
    fused *= torch.logspace(-6, 3, num_tokens)[:, None, None, None]
    fused = fused.to(device)
    k, v = fused[:, 1], fused[:, 2]
    slots = torch.randperm(NUM_SLOTS, generator=gen)[:num_tokens].to(device)
    pools = [_poisoned_pool(pool_dtype, device) for _ in range(4)]
    store_kv_torch(pools[0], pools[1], k, v, slots, scale, 2 * scale)
    triton_kernel(pools[2], pools[3], k, v, slots, scale, 2 * scale)
    assert _same(pools[2], pools[0]) and _same(pools[3], pools[1])
    assert pools[2].float()[slots].isfinite().all()  # every written row, saturated not inf/NaN
    assert pools[2].float().isnan().sum() == (NUM_SLOTS - num_tokens) * NUM_KV_HEADS * HEAD_DIM


@needs_triton
@pytest.mark.parametrize("pool_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_rounding_at_binade_edges_and_ties(device, pool_dtype):
    """Values that round up into the next power of two, and exact ties (round to even)."""
    values = torch.tensor([127.9751, -126.83, 31.1835, 15.9, 0.0, -0.0, 1e-9, 1.0625, 1.1875, 3.0e5])
    x = values[:, None, None].expand(-1, 1, 16).contiguous().to(device)
    slots = torch.arange(len(values), device=device)
    pool_k = torch.zeros((len(values), 1, 16), dtype=pool_dtype, device=device)
    pool_v = pool_k.clone()
    triton_kernel(pool_k, pool_v, x, x, slots)
    expect = quantize_fp8(values, pool_dtype, 1.0)
    assert _same(pool_k[:, 0, 0].cpu(), expect)
    assert pool_k[0, 0, 0].float() == 128.0


@needs_triton
def test_store_bfloat16_pool(device):
    k = torch.randn((5, NUM_KV_HEADS, HEAD_DIM)).to(torch.bfloat16).to(device)
    slots = torch.tensor([3, 0, 47, 8, 9], device=device)
    pools = [_poisoned_pool(torch.bfloat16, device) for _ in range(4)]
    store_kv_torch(pools[0], pools[1], k, -k, slots)
    triton_kernel(pools[2], pools[3], k, -k, slots)
    assert _same(pools[2], pools[0]) and _same(pools[3], pools[1])


def test_scale_from_amax():
    assert scale_from_amax(448.0 * 3, torch.float8_e4m3fn) == 3.0 * SCALE_HEADROOM
    assert scale_from_amax(0.0, torch.float8_e5m2) is None
    assert scale_from_amax(float("nan"), torch.float8_e4m3fn) is None
