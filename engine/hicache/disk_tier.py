"""HiCache's disk tier (a `StorageTier`): prefetching a `DiskStore`'s blocks for waiting requests on
a reader thread and writing blocks behind the engine loop on a writer thread.

The engine thread calls everything here except `_read_blocks` / `_write_block`. A write that fails
(a full or read-only disk) costs hits, never answers: counted in `num_write_failures` and logged,
at most one line per `RateLimitedLog` interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..kvcache.kv_pool import KVPool
from ..kvcache.radix_cache import TreeNode
from .block_format import Block, kv_fingerprint, kv_needs_calibration
from .disk_store import DiskStore
from .host_pool import HostPool
from .storage_tier import (
    LOADING,
    MISS,
    BackgroundWork,
    RateLimitedLog,
    TierMatch,
    Where,
    gather_kv,
    path_slots,
    read_after_writes,
    read_result,
)

if TYPE_CHECKING:
    from ..distributed.tier_mirror import TierMirror

logger = logging.getLogger(__name__)


@dataclass
class _Prefetch:
    first_block: int
    future: Future
    num_agreed: int | None = None  # tensor parallelism: the blocks every rank has read


class DiskTier:
    name = "disk"

    def __init__(self, store: DiskStore, device: KVPool, host: HostPool, model_path: str, tp: tuple[int, int] = (1, 0)):
        self.disk_store = store
        self._tp = tp  # (tp_size, rank): a rank's KV holds its own heads
        self.device = device
        self.host = host
        self._model_path = model_path
        self._prefetches: dict[str, _Prefetch] = {}
        self._keys: dict[str, tuple[int, list[str]]] = {}  # rid -> (num tokens, block keys)
        self._pending_writes: set[str] = set()
        self._work = BackgroundWork("disk")
        self._lock = threading.Lock()
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="radixgate-hicache-prefetch")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="radixgate-hicache-write")
        self.num_backup_tokens = 0
        self.num_write_failures = 0
        self._write_failure_log = RateLimitedLog()
        self.mirror: TierMirror | None = None  # tensor parallelism: the same reads and writes on ranks 1..N-1

    @property
    def ready_store(self) -> DiskStore | None:
        """The store, once the KV layout is final: an FP8 pool that calibrates its scales on its
        first batch has no stable fingerprint before that batch, so its disk tier starts after it."""
        store = self.disk_store
        if not store.fingerprint:
            if kv_needs_calibration(self.device):
                return None
            store.fingerprint = kv_fingerprint(self._model_path, self.device, *self._tp)
        return store

    def ready_fingerprint(self) -> str | None:
        store = self.ready_store
        return store.fingerprint if store is not None else None

    # ---- reads --------------------------------------------------------------------------------
    def match(self, rid: str, tokens: Sequence[int], namespace: Hashable, num_in_memory: int) -> TierMatch:
        """The disk part of a prefix past the `num_in_memory` tokens found on device and host:
        its blocks once read, loading while they are being read (the request waits), a miss when
        the disk has nothing more."""
        store = self.ready_store
        if store is None:
            return MISS
        bs = store.block_size
        cached = self._keys.get(rid)
        if cached is None or cached[0] != len(tokens):
            cached = self._keys[rid] = (len(tokens), store.block_keys(list(tokens), namespace))
        keys = cached[1]
        num_blocks = store.num_cached_blocks(keys)
        p = self._prefetches.get(rid)
        if p is None:
            if num_blocks * bs <= num_in_memory:
                return MISS
            first = num_in_memory // bs
            future = self._reader.submit(self._read_blocks, keys[first:num_blocks])
            self._work.track(future)
            self._prefetches[rid] = _Prefetch(first, future)
            if self.mirror is not None:
                self.mirror.prefetch("disk", rid, keys[first:num_blocks])
            return LOADING
        if not p.future.done():
            return LOADING
        blocks = p.future.result()
        if self.mirror is not None:  # a block missing or damaged on any rank is a miss on every rank
            blocks = self.mirror.agreed("disk", rid, p, blocks)
        return read_result(p.first_block, bs, blocks, num_in_memory)

    def _read_blocks(self, keys: list[str]) -> list[Block]:
        blocks = []
        for key in keys:
            block = self.disk_store.get(key)
            if block is None:
                break  # a prefix cannot skip a block: the rest is recomputed
            blocks.append(block)
        return blocks

    def read_async(self, keys: list[str]) -> Future:
        """Ranks 1..N-1: reads the leading stored blocks of `keys` on the reader thread, after every
        write queued before (rank 0 counts a block once its own write finished; this rank's may lag)."""
        self.disk_store.num_cached_blocks(keys)  # marks them recently used, as rank 0's match did
        future = read_after_writes(self._writer, self._reader, self._read_blocks, keys)
        self._work.track(future)
        return future

    def wait(self, timeout: float) -> None:
        """Blocks until some prefetch finishes (or `timeout`): what the loop does when nothing else
        can run, instead of spinning."""
        pending = [p.future for p in self._prefetches.values() if not p.future.done()]
        if pending:
            wait(pending, timeout=timeout, return_when="FIRST_COMPLETED")

    def forget(self, rid: str) -> None:
        """The request was admitted, finished or aborted: drops its prefetch and keys."""
        self._prefetches.pop(rid, None)
        self._keys.pop(rid, None)

    # ---- writes -------------------------------------------------------------------------------
    def write_path(self, path: list[TreeNode], namespace: Hashable) -> int:
        """Queues the full blocks of the tokens along `path` (root first) that the disk lacks;
        returns how many leading tokens of the path the disk will then hold (0: nothing queued)."""
        store = self.ready_store
        if store is None:
            return 0
        keys = store.block_keys([t for n in path for t in n.key], namespace)
        todo = [j for j, key in enumerate(keys) if key not in self._pending_writes and key not in store]
        if not todo:
            return 0
        where = path_slots(path)
        bs = store.block_size
        blocks = [(keys[j], where[j * bs : (j + 1) * bs]) for j in todo]
        self.write_blocks(blocks)
        if self.mirror is not None:
            self.mirror.write("disk", blocks)
        return (todo[-1] + 1) * bs

    def write_blocks(self, blocks: list[tuple[str, Where]]) -> None:
        """Queues the blocks (key, where its tokens' KV is) that are neither stored nor queued."""
        for key, where in blocks:
            if key in self._pending_writes or key in self.disk_store:
                continue
            k, v = gather_kv(self.device, self.host, where)
            self._pending_writes.add(key)
            self._work.track(self._writer.submit(self._write_block, key, k, v))

    def _write_block(self, key: str, k: torch.Tensor, v: torch.Tensor) -> None:
        try:
            self.disk_store.put(key, k, v)
            self.num_backup_tokens += self.disk_store.block_size
        except OSError as e:
            self.num_write_failures += 1  # a full or read-only disk costs hits, never answers
            self._write_failure_log.warning(
                logger,
                "HiCache disk tier: writing a block under %s failed (%s); %d write failures so far",
                self.disk_store.root,
                e,
                self.num_write_failures,
            )
        finally:
            with self._lock:
                self._pending_writes.discard(key)

    # ---- lifecycle ----------------------------------------------------------------------------
    def drain(self, timeout: float = 30.0) -> None:
        """Waits for every background read and write to finish."""
        self._work.drain(timeout)

    def check_idle(self) -> None:
        assert not self._prefetches, f"{len(self._prefetches)} disk prefetches held while idle"
        self.drain()
        assert not self._pending_writes, "disk writes still pending while idle"
        # Engines started later on the same directory (a restart within one process) add files.
        self.disk_store.check_consistency(sole_writer=False)

    def stats(self) -> dict[str, object]:
        store = self.disk_store
        return {
            "hicache_bytes_used_disk": store.bytes_used,
            "hicache_disk_capacity_bytes": store.capacity_bytes,
            "hicache_disk_entries": len(store),
            "hicache_backup_tokens_disk": self.num_backup_tokens,
            "hicache_disk_read_failures": store.num_read_failures,
            "hicache_disk_write_failures": self.num_write_failures,
        }

    def close(self) -> None:
        """Finishes queued writes (so a restart finds them) and stops the threads."""
        self._reader.shutdown(wait=True)
        self._writer.shutdown(wait=True)
