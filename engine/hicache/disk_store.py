"""The disk tier of HiCache: content-addressed blocks of KV in a directory that outlives the process.

A block is the KV of `block_size` consecutive tokens. Its key chains SHA-256 over every earlier
block, so a key names a whole prefix, never just the block's own tokens:

    h_0 = sha256(fingerprint, namespace, block_size)       # model + KV layout + tenant
    h_j+1 = sha256(h_j, tokens of block j as int32)        # key of block j = h_j+1.hex()

A tenant's blocks are never served to another (the namespace is in h_0), nor to another model or
KV dtype (the fingerprint is).

Entry file `<root>/<key[:2]>/<key>.kv`:

    MAGIC | u32 header length | header (JSON: key, dtype, k and v shapes) | payload (K then V, raw) | sha256

Written to `<root>/tmp/` and renamed into place (atomic on POSIX), so a crash mid-write leaves
at most a temporary file, removed on the next start. An entry whose checksum, length, key or
shape is wrong is a miss: deleted, counted in `num_read_failures`, never served. Without fsync
an OS crash can leave a renamed file with bad contents; the checksum catches that too.

Thread-safety: the index (key -> bytes, in LRU order) is guarded by a lock; `put` and `get` may
run on background threads while the engine thread calls `num_cached_blocks`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import tempfile
import threading
from collections import OrderedDict

import torch

MAGIC = b"RGKVBLK1"
_DIGEST = 32


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def chain_keys(tokens: list[int], namespace: object, fingerprint: str, block_size: int) -> list[str]:
    """Keys of the full blocks of `tokens` (a trailing partial block has no key); the disk and the
    remote tier name a block alike."""
    h = hashlib.sha256(f"{fingerprint}|{namespace!r}|{block_size}".encode())
    keys = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        h = hashlib.sha256(h.digest() + struct.pack(f"<{block_size}i", *tokens[start : start + block_size]))
        keys.append(h.hexdigest())
    return keys


def rank_key(fingerprint: str, key: str) -> str:
    """Tensor parallelism: the key of rank r's share of the block rank 0 names `key` (rank 0 names
    blocks by `chain_keys` with its own fingerprint; every rank's fingerprint carries tp_size and
    the rank, so no rank, nor an engine of another tp_size, reads another's files)."""
    return hashlib.sha256(f"{fingerprint}|{key}".encode()).hexdigest()


def encode_block(header: dict[str, object], k: torch.Tensor, v: torch.Tensor) -> list[bytes]:
    """The entry format's parts, in order (joined, they are the entry): magic and header, K, V, digest."""
    head = json.dumps({**header, "dtype": _dtype_name(k.dtype), "shape": list(k.shape)}).encode()
    kb = k.contiguous().cpu().view(torch.uint8).numpy().tobytes()
    vb = v.contiguous().cpu().view(torch.uint8).numpy().tobytes()
    digest = hashlib.sha256(head + kb + vb).digest()
    return [MAGIC + struct.pack("<I", len(head)) + head, kb, vb, digest]


def decode_block(
    data: bytes, header: dict[str, object], dtype: torch.dtype, block_shape: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(k, v) of an entry, or None when its checksum or length is wrong or its header differs from
    `header` (key, and whatever else the writer put there) or from `dtype` and `block_shape`."""
    start = len(MAGIC) + 4
    if len(data) < start + _DIGEST or data[: len(MAGIC)] != MAGIC:
        return None
    (header_len,) = struct.unpack("<I", data[len(MAGIC) : start])
    body = data[start:-_DIGEST]
    if header_len > len(body) or hashlib.sha256(body).digest() != data[-_DIGEST:]:
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


class DiskStore:
    def __init__(
        self,
        root: str,
        capacity_bytes: int,
        fingerprint: str,
        block_size: int,
        dtype: torch.dtype,
        token_shape: tuple[int, ...],
        num_layers: int,
    ):
        self.root = root
        self.capacity_bytes = capacity_bytes
        self.fingerprint = fingerprint
        self.block_size = block_size
        self.dtype = dtype
        # k and v of a block: [num_layers, block_size, *token_shape]
        self.block_shape = (num_layers, block_size, *token_shape)
        self._lock = threading.Lock()
        self._index: OrderedDict[str, int] = OrderedDict()  # oldest first
        self.bytes_used = 0
        self.num_read_failures = 0  # corrupt, truncated, wrong-shape or vanished entries
        self.num_writes = 0
        self._tmp_dir = os.path.join(root, "tmp")
        os.makedirs(self._tmp_dir, exist_ok=True)
        self._scan()

    def _scan(self) -> None:
        """Rebuilds the index from the directory (warm restart); drops leftover temporary files."""
        for name in os.listdir(self._tmp_dir):
            os.unlink(os.path.join(self._tmp_dir, name))
        found = []
        for sub in os.listdir(self.root):
            folder = os.path.join(self.root, sub)
            if sub == "tmp" or not os.path.isdir(folder):
                continue
            for name in os.listdir(folder):
                if name.endswith(".kv"):
                    st = os.stat(os.path.join(folder, name))
                    found.append((st.st_mtime_ns, name[:-3], st.st_size))
        for _, key, size in sorted(found):
            self._index[key] = size
            self.bytes_used += size

    # ---- keys ---------------------------------------------------------------------------------
    def block_keys(self, tokens: list[int], namespace: object) -> list[str]:
        """Keys of the full blocks of `tokens` (a trailing partial block has no key)."""
        return chain_keys(tokens, namespace, self.fingerprint, self.block_size)

    def path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key + ".kv")

    # ---- index --------------------------------------------------------------------------------
    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._index

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    def num_cached_blocks(self, keys: list[str]) -> int:
        """How many leading keys are stored; marks them recently used, the first block last, so
        LRU removal takes a prefix's tail before its head (a head is shared more often)."""
        with self._lock:
            n = 0
            while n < len(keys) and keys[n] in self._index:
                n += 1
            for key in reversed(keys[:n]):
                self._index.move_to_end(key)
            return n

    def _forget(self, key: str) -> None:
        with self._lock:
            size = self._index.pop(key, None)
            if size is not None:
                self.bytes_used -= size

    # ---- write --------------------------------------------------------------------------------
    def put(self, key: str, k: torch.Tensor, v: torch.Tensor) -> None:
        """Stores one block atomically; k, v: [num_layers, block_size, *token_shape]."""
        assert tuple(k.shape) == self.block_shape and tuple(v.shape) == self.block_shape, (
            f"block shape {tuple(k.shape)} != {self.block_shape}"
        )
        if key in self:
            return
        parts = encode_block({"key": key}, k, v)
        final = self.path(key)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._tmp_dir, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                for part in parts:
                    f.write(part)
            os.replace(tmp, final)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        size = os.path.getsize(final)
        with self._lock:
            if key not in self._index:
                self._index[key] = size
                self.bytes_used += size
                self.num_writes += 1
        self._evict_over_budget()

    def _evict_over_budget(self) -> None:
        while True:
            with self._lock:
                if self.bytes_used <= self.capacity_bytes or not self._index:
                    return
                key, size = self._index.popitem(last=False)
                self.bytes_used -= size
            try:
                os.unlink(self.path(key))
            except FileNotFoundError:
                pass

    # ---- read ---------------------------------------------------------------------------------
    def get(self, key: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The block's (k, v), or None if it is absent or fails any check (then it is removed)."""
        try:
            with open(self.path(key), "rb") as f:
                data = f.read()
        except OSError:
            if key in self:  # indexed but gone or unreadable
                self._fail(key)
            return None
        block = self._decode(key, data)
        if block is None:
            self._fail(key)
        return block

    def _decode(self, key: str, data: bytes) -> tuple[torch.Tensor, torch.Tensor] | None:
        return decode_block(data, {"key": key}, self.dtype, self.block_shape)

    def _fail(self, key: str) -> None:
        self._forget(key)
        self.num_read_failures += 1
        try:
            os.unlink(self.path(key))
        except FileNotFoundError:
            pass

    # ---- checks -------------------------------------------------------------------------------
    def check_consistency(self, sole_writer: bool = True) -> None:
        """Asserts that the byte count matches the index and no temporary file is left; with
        `sole_writer` (no other store wrote to this directory since this one started), also that
        every file is indexed: none leaked by LRU removal or a failed write."""
        assert not os.listdir(self._tmp_dir), "temporary files left in the disk tier"
        with self._lock:
            index = dict(self._index)
            assert sum(index.values()) == self.bytes_used, "disk tier byte count disagrees with its index"
        if not sole_writer:
            return
        for sub in os.listdir(self.root):
            folder = os.path.join(self.root, sub)
            if sub != "tmp" and os.path.isdir(folder):
                orphans = [n for n in os.listdir(folder) if n.endswith(".kv") and n[:-3] not in index]
                assert not orphans, f"disk tier files not in its index: {orphans[:3]}"
