"""The LM head product: hidden states [n, hidden] x weight [vocab, hidden] -> float32 logits [n, vocab].

On CPU in float32 it is the decode step's largest GEMM by far (the tiny model: 89% of a batch-32 step's
FLOPs), and `F.linear` (MKL) runs it well below the machine's peak: its reduction dimension is only the
hidden size. oneDNN with the weight reordered once into its blocked layout runs it much faster. That
is what PyTorch Inductor's CPU freezing pass does for linear layers (`mkldnn._reorder_linear_weight` +
`mkldnn._linear_pointwise`). Measured on this machine's AVX2 EPYC, one thread, the built-in model's
256 x 100,279 head at 32 rows: 40-50 GFLOP/s against 22-26 for `F.linear` (the 2048^3 product: ~80).
The smaller linear layers measured no faster packed, so they stay on `F.linear`.

The packed copy costs the LM head's size in memory once more; it is made on first use and remade when
the weight changes. Elsewhere (CUDA, bf16/fp16, a torch without oneDNN) the product is `F.linear`.
The two differ by float32 rounding only (summation order: |dlogit| ~3e-6 on the built-in model)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# oneDNN picks its blocked layout for an expected row count; decode batches are the case that matters
_EXPECTED_ROWS = 32


class PackedLMHead:
    """Holds one weight's oneDNN-packed copy, keyed by the weight's storage and version."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._packed: torch.Tensor | None = None
        self.enabled = _onednn_available()

    def logits(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.enabled and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32:
            packed = self._packed_for(weight)
            if packed is not None:
                return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, None, "none", [], "")
        return F.linear(x, weight).float()

    def _packed_for(self, weight: torch.Tensor) -> torch.Tensor | None:
        # an inference tensor has no version counter: its storage alone identifies it
        key = (weight.data_ptr(), -1 if weight.is_inference() else weight._version)
        if key != self._key:
            try:
                self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _EXPECTED_ROWS)
            except RuntimeError:  # this build's oneDNN refuses the shape: BLAS from now on
                self.enabled, self._packed = False, None
            self._key = key
        return self._packed


def _onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
