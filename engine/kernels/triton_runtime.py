"""Guarded Triton import, and the choice between a compiled and an interpreted kernel.

Kernel modules import `triton` and `tl` from here so that they import on machines without
Triton (the torch references still work there; launching a Triton kernel raises).

Whether Triton interprets a kernel is normally fixed when `@triton.jit` runs (by
`TRITON_INTERPRET=1` at import time). The launchers call `for_device` instead, so that one
imported kernel runs compiled on CUDA tensors and under Triton's interpreter on CPU tensors,
whatever the import order was.
"""
from __future__ import annotations

from typing import Any

import torch

try:
    import triton
    import triton.language as tl
    HAS_TRITON = True
except ImportError:  # the kernel modules must still import; only launching needs Triton
    HAS_TRITON = False

    class _MissingTriton:
        """Stands in for `triton` and `triton.language`: `@triton.jit` leaves the function as is."""
        constexpr = "constexpr"

        @staticmethod
        def jit(fn: Any = None, **_: Any) -> Any:
            return fn if fn is not None else (lambda f: f)

    triton = tl = _MissingTriton()  # type: ignore[assignment]

_interpreted: dict[Any, Any] = {}


def require_triton() -> None:
    """Raise a ValueError that says what to do when Triton is not installed."""
    if not HAS_TRITON:
        raise ValueError("the Triton attention backend needs the `triton` package; install it "
                         "(pip install triton) or use attention_backend='torch'")


def for_device(kernel: Any, device: torch.device) -> Any:
    """The kernel to launch for tensors on `device`: compiled on CUDA, interpreted elsewhere."""
    require_triton()
    if device.type == "cuda":
        return kernel
    from triton.runtime.interpreter import InterpretedFunction
    if isinstance(kernel, InterpretedFunction):
        return kernel
    if kernel not in _interpreted:
        _interpreted[kernel] = InterpretedFunction(kernel.fn)
    return _interpreted[kernel]


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def dot_operands(dtype: torch.dtype, device: torch.device) -> tuple[Any, str]:
    """(operand dtype, input precision) for `tl.dot` in attention over `dtype` activations.

    16-bit activations multiply in their own dtype on CUDA (tensor cores, float32 accumulation).
    float32 keeps full precision (no TF32) so that it matches the reference, and the
    interpreter always multiplies in float32 because its dot mishandles bfloat16."""
    if device.type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        return (tl.float16 if dtype == torch.float16 else tl.bfloat16), "tf32"
    return tl.float32, "ieee"
