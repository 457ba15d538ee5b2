"""FP8 KV formats: which torch dtypes they are, their grids, and per-layer scales.

A quantized pool stores `x * (1 / scale)` rounded to the FP8 grid (round to nearest even, saturating
at the format's largest finite value); attention multiplies back by `scale`. A scale computed from observed K/V
maps their largest magnitude to half the format's largest value: later tokens up to twice as
large still fit (vLLM's dynamic KV scales leave similar headroom), and the relative precision of
normal FP8 values does not depend on their magnitude, so the headroom costs nothing else.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

FP8_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


class Fp8Grid(NamedTuple):
    """The representable values: `mantissa_bits` after the point, exponents >= `min_normal_exp`
    (smaller values are subnormals on the same spacing), magnitudes up to `max_value`."""

    mantissa_bits: int
    min_normal_exp: int
    max_value: float


_GRIDS = {
    torch.float8_e4m3fn: Fp8Grid(3, -6, 448.0),
    torch.float8_e5m2: Fp8Grid(2, -14, 57344.0),
}


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in _GRIDS


def fp8_grid(dtype: torch.dtype) -> Fp8Grid:
    assert dtype in _GRIDS, f"{dtype} is not an FP8 KV dtype"
    return _GRIDS[dtype]


def quantize_fp8(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """x (any float dtype) -> FP8 `dtype` holding x / scale, saturated (never inf or NaN)."""
    top = fp8_grid(dtype).max_value
    # Multiplying by the reciprocal (one IEEE rounding) is what the Triton kernel does too.
    return (x.to(torch.float32) * (1.0 / scale)).clamp(-top, top).to(dtype)


SCALE_HEADROOM = 2.0


def scale_from_amax(amax: float, dtype: torch.dtype) -> float | None:
    """The scale that maps the largest magnitude seen to 1 / SCALE_HEADROOM of the format's range;
    None when `amax` is zero or not finite (there is nothing to calibrate against)."""
    if not 0.0 < amax < float("inf"):
        return None
    return float(amax) * SCALE_HEADROOM / fp8_grid(dtype).max_value
