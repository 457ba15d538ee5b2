"""How the disk and the remote tier name and encode a block of KV, both keyed by the deployment's
cache secret (`cache_secret.py`) so that neither what a store holds nor what it is given can be
forged or probed by someone who can read or write the store but lacks the secret.

Keys chain over every earlier block, so a key names a whole prefix, never just its own tokens:

    h_0 = HMAC(key_secret, fingerprint | namespace | block_size)   # model + KV layout + tenant
    h_j+1 = sha256(h_j, tokens of block j as int32)                # key of block j = h_j+1.hex()

`key_secret` is the secret's `hicache block keys` key: a guessed prompt's keys cannot be computed
from the model, the tenant's name and the tokens alone.

An entry (a disk file, a remote value):

    MAGIC | u32 header length | header (JSON: key, dtype, shape, ...) | K | V | HMAC(mac_secret, all before)

`mac_secret` is the secret's `hicache value mac` key and never enters the store: a value whose tag,
length, key, fingerprint, dtype or shape is wrong (damaged, truncated, written for another key or
model, or forged with random KV and a recomputed checksum) decodes to None, a miss.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import struct

import torch

from ..cache_secret import CacheSecret
from ..kvcache.kv_pool import KVPool

MAGIC = b"RGKVBLK2"
_TAG = 32
Block = tuple[torch.Tensor, torch.Tensor]  # (k, v): [num_layers, block_size, *per-token shape] each


class BlockFormat:
    """The keys and the entry format of one deployment (its secret)."""

    def __init__(self, secret: CacheSecret):
        self._key_secret = secret.derive("hicache block keys")
        self._mac_secret = secret.derive("hicache value mac")

    def chain_keys(self, tokens: list[int], namespace: object, fingerprint: str, block_size: int) -> list[str]:
        """Keys of the full blocks of `tokens` (a trailing partial block has no key)."""
        h = hmac.new(self._key_secret, f"{fingerprint}|{namespace!r}|{block_size}".encode(), hashlib.sha256).digest()
        keys = []
        for start in range(0, len(tokens) - block_size + 1, block_size):
            h = hashlib.sha256(h + struct.pack(f"<{block_size}i", *tokens[start : start + block_size])).digest()
            keys.append(h.hex())
        return keys

    def _tag(self, *parts: bytes) -> bytes:
        mac = hmac.new(self._mac_secret, digestmod=hashlib.sha256)
        for part in parts:
            mac.update(part)
        return mac.digest()

    def encode(self, header: dict[str, object], k: torch.Tensor, v: torch.Tensor) -> list[bytes]:
        """The entry's parts, in order (joined, they are the entry): magic and header, K, V, tag."""
        head = json.dumps({**header, "dtype": _dtype_name(k.dtype), "shape": list(k.shape)}).encode()
        kb = k.contiguous().cpu().view(torch.uint8).numpy().tobytes()
        vb = v.contiguous().cpu().view(torch.uint8).numpy().tobytes()
        first = MAGIC + struct.pack("<I", len(head)) + head
        return [first, kb, vb, self._tag(first, kb, vb)]

    def decode(
        self, data: bytes, header: dict[str, object], dtype: torch.dtype, block_shape: tuple[int, ...]
    ) -> Block | None:
        """(k, v) of an entry, or None when its tag or length is wrong or its header differs from
        `header` (key, and whatever else the writer put there) or from `dtype` and `block_shape`."""
        start = len(MAGIC) + 4
        if len(data) < start + _TAG or data[: len(MAGIC)] != MAGIC:
            return None
        if not hmac.compare_digest(self._tag(data[:-_TAG]), data[-_TAG:]):
            return None
        (header_len,) = struct.unpack("<I", data[len(MAGIC) : start])
        body = data[start:-_TAG]
        if header_len > len(body):
            return None
        try:
            found = json.loads(body[:header_len])
        except ValueError:
            return None
        want = {**header, "dtype": _dtype_name(dtype), "shape": list(block_shape)}
        if not isinstance(found, dict) or any(found.get(name) != value for name, value in want.items()):
            return None
        payload = bytearray(body[header_len:])
        half = len(payload) // 2
        expected = math.prod(block_shape) * torch.empty((), dtype=dtype).element_size()
        if half != expected or len(payload) != 2 * expected:
            return None
        raw = torch.frombuffer(payload, dtype=torch.uint8)
        return raw[:half].view(dtype).reshape(block_shape), raw[half:].view(dtype).reshape(block_shape)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def rank_key(fingerprint: str, key: str) -> str:
    """Tensor parallelism: the key of rank r's share of the block rank 0 names `key` (rank 0's keys
    are keyed by the secret already; every rank's fingerprint carries tp_size and the rank, so no
    rank, nor an engine of another tp_size, reads another's blocks)."""
    return hashlib.sha256(f"{fingerprint}|{key}".encode()).hexdigest()


def kv_needs_calibration(pool: KVPool) -> bool:
    """An FP8 pool that calibrates its scales on its first batch has no stable fingerprint before it."""
    return any(getattr(pool, "_needs_scales", ()))


def kv_fingerprint(model_path: str, pool: KVPool, tp_size: int = 1, tp_rank: int = 0) -> str:
    """Identifies the model and the KV layout, so the disk and the remote store never serve another
    model's KV (or KV in another dtype, scale, or tensor-parallel shard): config.json, the weight
    files' sizes and edges, the pool's layout and FP8 scales, tp_size and rank."""
    h = hashlib.sha256()
    with open(os.path.join(model_path, "config.json"), "rb") as f:
        h.update(f.read())
    for name in sorted(os.listdir(model_path)):
        if name.endswith(".safetensors"):
            path = os.path.join(model_path, name)
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                head = f.read(1 << 20)
                f.seek(max(0, size - (1 << 20)))
                tail = f.read()
            h.update(f"{name}:{size}".encode() + hashlib.sha256(head + tail).digest())
    layout = {
        "dtype": str(pool.k_buffers[0].dtype),
        "shape": list(pool.k_buffers[0].shape[1:]),
        "layers": pool.num_layers,
        "k_scales": [float(s) for s in pool.k_scales],
        "v_scales": [float(s) for s in pool.v_scales],
        "tp": [tp_size, tp_rank],
    }
    h.update(json.dumps(layout, sort_keys=True).encode())
    return h.hexdigest()
