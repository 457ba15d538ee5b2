"""What both roles must agree on before any KV moves, and the KV's wire layout.

A transfer carries the KV of tokens [start, end) of one prompt as one token-major byte run:
token t's K of every layer, then its V of every layer, `[num_tokens, 2 * num_layers, kv_heads,
head_dim]` in the pool's dtype (FP8 pools as their raw bytes). Both pools must therefore have the
same layer count, KV heads (per tensor-parallel rank), head size, dtype and page size, and the
model must be the same one: `KVLayout.check_peer` refuses anything else, naming what differs."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..kvcache.kv_pool import KVPool
from ..protocol import StreamDelta


class HandshakeError(RuntimeError):
    """The peers cannot exchange KV (layout, model, key or protocol differ); the message says what."""


class TransferError(RuntimeError):
    """A transfer failed after the handshake: the peer went away, timed out, or sent a corrupt chunk."""


def model_fingerprint(model_path: str) -> str:
    """config.json and the weight files' names and sizes: two engines on the same checkpoint agree."""
    h = hashlib.sha256()
    with open(os.path.join(model_path, "config.json"), "rb") as f:
        h.update(f.read())
    for name in sorted(os.listdir(model_path)):
        if name.endswith(".safetensors"):
            h.update(f"{name}:{os.path.getsize(os.path.join(model_path, name))}".encode())
    return h.hexdigest()[:32]


@dataclass(frozen=True)
class KVLayout:
    model: str  # model_fingerprint of the checkpoint
    num_layers: int
    kv_heads: int  # per rank
    head_dim: int
    dtype: str  # the pool's dtype, e.g. "float32", "float8_e4m3fn"
    page_size: int
    tp_size: int
    tp_rank: int

    @classmethod
    def of(cls, pool: KVPool, page_size: int, model: str, tp_size: int = 1, tp_rank: int = 0) -> KVLayout:
        dtype = str(pool.dtype).removeprefix("torch.")
        return cls(model, pool.num_layers, pool.num_kv_heads, pool.head_dim, dtype, page_size, tp_size, tp_rank)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> KVLayout:
        if not isinstance(data, dict) or set(data) != set(cls.__dataclass_fields__):
            raise HandshakeError(f"the peer sent no valid KV layout: {json.dumps(data)[:200]}")
        return cls(**data)

    def check_peer(self, peer: KVLayout, me: str = "prefill worker", them: str = "decode worker") -> None:
        """Raises HandshakeError naming every field that differs, with each side's value."""
        ours, theirs = self.to_dict(), peer.to_dict()
        names = {"dtype": "KV dtype (--kv-cache-dtype)", "page_size": "page size (--page-size)"}
        diffs = [
            f"{names.get(k, k)}: {ours[k]} on the {me}, {theirs[k]} on the {them}" for k in ours if ours[k] != theirs[k]
        ]
        if diffs:
            raise HandshakeError("the prefill and decode workers' KV layouts differ; " + "; ".join(diffs))

    @property
    def token_bytes(self) -> int:
        elem = torch.empty((), dtype=getattr(torch, self.dtype)).element_size()
        return 2 * self.num_layers * self.kv_heads * self.head_dim * elem


def set_when_finished(event: threading.Event) -> Callable[[Any, StreamDelta], None]:
    """A request listener that sets `event` on the request's last delta."""

    def listener(req: Any, delta: StreamDelta) -> None:
        if delta.finished:
            event.set()

    return listener


def pack_kv(pool: KVPool, slots: list[int]) -> torch.Tensor:
    """The KV at `slots` as one contiguous uint8 tensor, token-major (see the module docstring)."""
    index = torch.tensor(slots, dtype=torch.long, device=pool.device)
    # kv: [num_tokens, 2 * num_layers, kv_heads, head_dim]
    kv = torch.stack([k[index] for k in pool.k_buffers] + [v[index] for v in pool.v_buffers], dim=1)
    return kv.cpu().contiguous().view(torch.uint8).reshape(-1)


def write_kv(pool: KVPool, slots: list[int], data: torch.Tensor) -> None:
    """Writes a token-major uint8 run (as `pack_kv` makes it) into the pool at `slots`."""
    num_layers = pool.num_layers
    kv = data.view(pool.dtype).reshape(len(slots), 2 * num_layers, pool.num_kv_heads, pool.head_dim)
    kv = kv.to(pool.device)
    index = torch.tensor(slots, dtype=torch.long, device=pool.device)
    for layer in range(num_layers):
        pool.k_buffers[layer][index] = kv[:, layer]
        pool.v_buffers[layer][index] = kv[:, num_layers + layer]


def adopt_scales(pool: KVPool, k_scales: list[float], v_scales: list[float]) -> None:
    """FP8: the receiving pool dequantizes with the sender's per-layer scales. A layer not yet
    calibrated takes them; one calibrated differently refuses (its cached KV uses its own)."""
    if not pool.is_fp8:
        return
    for layer in range(pool.num_layers):
        pair = (float(k_scales[layer]), float(v_scales[layer]))
        if pool._needs_scales[layer]:
            pool.k_scales[layer], pool.v_scales[layer] = pair
            pool._needs_scales[layer] = False
        elif (pool.k_scales[layer], pool.v_scales[layer]) != pair:
            raise HandshakeError(
                f"FP8 KV scales of layer {layer} differ: {pool.k_scales[layer]}/{pool.v_scales[layer]} here, "
                f"{pair[0]}/{pair[1]} on the prefill worker; give both workers the same checkpoint scales"
            )
