"""The KV pool: per-layer K and V buffers addressed by slot."""

from __future__ import annotations

import logging
import re

import torch

from ..kernels.fp8 import is_fp8, scale_from_amax

logger = logging.getLogger(__name__)
_LAYER_SCALE = re.compile(r"layers\.(\d+)\..*\.([kv])_scale$")


class KVPool:
    """k_buffers[layer], v_buffers[layer]: [num_slots, num_kv_heads, head_dim] of `dtype`.

    An FP8 pool (torch.float8_e4m3fn / float8_e5m2) holds K / k_scale and V / v_scale with one
    scale pair per layer, fixed before the layer stores anything and never changed after, so
    every cached page (any tier) dequantizes with the scale it was written with. Scales come from
    the checkpoint (`model.layers.N.self_attn.k_scale` / `v_scale`) when it has them, otherwise
    from the K/V maxima of the first batch the layer sees, or 1.0 (with a warning) when that batch
    gives nothing to calibrate against. Float pools keep 1.0."""

    def __init__(
        self,
        num_slots: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: str | torch.device,
        checkpoint_scales: dict[str, torch.Tensor] | None = None,
    ):
        self.num_slots = num_slots
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (num_slots, num_kv_heads, head_dim)
        self.k_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        # Per-layer dequantization scales; 1.0 for float pools.
        self.k_scales = [1.0] * num_layers
        self.v_scales = [1.0] * num_layers
        self.is_fp8 = is_fp8(dtype)
        self._needs_scales = [self.is_fp8] * num_layers
        if self.is_fp8 and checkpoint_scales:
            self._load_scales(checkpoint_scales)

    def _load_scales(self, scales: dict[str, torch.Tensor]) -> None:
        found: dict[int, dict[str, float]] = {}
        for name, value in scales.items():
            match = _LAYER_SCALE.search(name)
            if match and int(match.group(1)) < self.num_layers:
                found.setdefault(int(match.group(1)), {})[match.group(2)] = float(value.float().max())
        for layer, pair in found.items():
            if set(pair) == {"k", "v"}:
                self.k_scales[layer], self.v_scales[layer] = pair["k"], pair["v"]
                self._needs_scales[layer] = False

    def calibrate_scales(self, layer_id: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Before a layer's first store into an FP8 pool without checkpoint scales: set its scales
        from this batch's K/V maxima (one device sync per layer, once). A no-op otherwise."""
        if not self._needs_scales[layer_id] or k.numel() == 0:
            return
        k_amax, v_amax = torch.stack([k.abs().amax(), v.abs().amax()]).float().tolist()
        k_scale, v_scale = scale_from_amax(k_amax, self.dtype), scale_from_amax(v_amax, self.dtype)
        if k_scale is None or v_scale is None:
            logger.warning(
                "layer %d: the first batch's K/V maxima (%g, %g) give no FP8 scale; using 1.0, which may lose accuracy",
                layer_id,
                k_amax,
                v_amax,
            )
        self.k_scales[layer_id] = k_scale or 1.0
        self.v_scales[layer_id] = v_scale or 1.0
        self._needs_scales[layer_id] = False

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * num_kv_heads * head_dim * elem

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.k_buffers + self.v_buffers)

    def read(self, slots: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Raw copies of every layer's K and V at `slots` (for moving pages between tiers)."""
        return [k[slots].clone() for k in self.k_buffers], [v[slots].clone() for v in self.v_buffers]

    def write(self, slots: torch.Tensor, ks: list[torch.Tensor], vs: list[torch.Tensor]) -> None:
        for layer in range(self.num_layers):
            self.k_buffers[layer][slots] = ks[layer]
            self.v_buffers[layer][slots] = vs[layer]
