"""Guarded Triton import, and the check that a kernel can run on the tensors' device.

Kernel modules import `triton` and `tl` from here so that they import on machines without
Triton (the torch references still work there; launching a Triton kernel raises ValueError).

Triton decides once, when it is imported, whether `@triton.jit` compiles or interprets (its
own standard-library functions included), by `TRITON_INTERPRET=1`. On a machine without a GPU
the Triton kernels can only run interpreted, so this module sets that variable before it imports
Triton there, unless Triton was imported already.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

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

    triton = tl = _MissingTriton()


def require_triton() -> None:
    """Raise a ValueError that says what to do when Triton is not installed."""
    if not HAS_TRITON:
        raise ValueError(
            "the Triton attention backend needs the `triton` package; install it "
            "(pip install triton) or use attention_backend='torch'"
        )


def is_interpreted(kernel: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def for_device(kernel: Any, device: torch.device) -> Any:
    """The kernel, after checking it can run on `device`: compiled kernels need CUDA tensors."""
    require_triton()
    if device.type != "cuda" and not is_interpreted(kernel):
        raise ValueError(
            "Triton kernels run on CPU tensors only under Triton's interpreter: set "
            "TRITON_INTERPRET=1 before triton is first imported, or use attention_backend='torch'"
        )
    return kernel


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
