"""The disk tier of HiCache: content-addressed blocks of KV in a directory that outlives the process.

A block is the KV of `block_size` consecutive tokens, named and encoded as `block_format.py`
says: its key chains over every earlier block, keyed by the cache secret, the tenant namespace and
the model's fingerprint, so a tenant's blocks are never served to another, nor to another model or
KV dtype, and nobody without the secret can compute a guessed prompt's file name.

Entry file `<root>/<key[:2]>/<key>.kv`: one entry of the block format (header, K, V, HMAC tag).

Written to `<root>/tmp/` and renamed into place (atomic on POSIX), so a crash mid-write leaves
at most a temporary file, removed on the next start. An entry whose tag, length, key or
shape is wrong is a miss: deleted, counted in `num_read_failures`, logged, never served; a file
rewritten by someone without the secret fails its tag too. Without fsync an OS crash can leave a
renamed file with bad contents; the tag catches that too.

Thread-safety: the index (key -> bytes, in LRU order) is guarded by a lock; `put` and `get` may
run on background threads while the engine thread calls `num_cached_blocks`.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections import OrderedDict

import torch

from .block_format import Block, BlockFormat
from .storage_tier import RateLimitedLog

logger = logging.getLogger(__name__)


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
        block_format: BlockFormat,
    ):
        self.root = root
        self.format = block_format
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
        self._read_failure_log = RateLimitedLog()
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
        return self.format.chain_keys(tokens, namespace, self.fingerprint, self.block_size)

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
        parts = self.format.encode({"key": key}, k, v)
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
    def get(self, key: str) -> Block | None:
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

    def _decode(self, key: str, data: bytes) -> Block | None:
        return self.format.decode(data, {"key": key}, self.dtype, self.block_shape)

    def _fail(self, key: str) -> None:
        self._forget(key)
        self.num_read_failures += 1
        self._read_failure_log.warning(
            logger,
            "HiCache disk tier: %s is damaged, truncated, gone or not written with this cache secret; "
            "a miss (%d so far)",
            self.path(key),
            self.num_read_failures,
        )
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
