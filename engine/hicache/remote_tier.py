"""HiCache's remote tier (a `StorageTier`): KV blocks in a store that every worker of the model
shares (a `StorageBackend`, e.g. Redis), one tier below the local disk.

Blocks and keys are the disk tier's (`block_format.py`): `DISK_BLOCK_TOKENS`-token blocks named by
hashes chained over the tokens, keyed by the cache secret, the tenant namespace and the KV
fingerprint (model, KV dtype and layout, FP8 scales, tp_size and rank), so workers with the same
secret share exactly the blocks that give the same tokens, a tenant never sees another's, and
nobody without the secret can compute a guessed prompt's keys. A value is the disk tier's entry
format with the fingerprint in its header too; one that fails its HMAC tag (damaged, or rewritten
by someone without the secret), is truncated, or names another key, fingerprint, dtype or shape is
a miss (`num_read_failures`, logged) and is overwritten by the next write of that block.

Nothing here touches the network on the engine thread:
- reads: the first time the scheduler looks at a request, a reader-thread job asks the store which
  blocks past the in-memory and disk prefix exist (one round trip for all of them) and fetches the
  leading ones. The request waits in the queue meanwhile, at most `timeout_s`; after that its
  remote part is a miss and it is recomputed.
- writes: a block's KV is copied out of the pools on the engine thread (as for the disk), then
  encoded and sent by the writer thread. At most `max_pending_blocks` wait; more are dropped
  (`num_writes_dropped`), so a slow store costs hits, never memory or time.
- while the store is down (`StorageBackend.is_up`), reads and writes are skipped altogether; a
  failed call is logged (at most one line per `RateLimitedLog` interval).
Blocks this worker wrote or read are remembered (`_known`, bounded) and not sent again; the memory
is dropped at each outage, since a restarted store comes back empty.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..kvcache.kv_pool import KVPool
from ..kvcache.radix_cache import TreeNode
from .block_format import Block, BlockFormat, kv_fingerprint, kv_needs_calibration
from .host_pool import HostPool
from .storage_backend import StorageBackend, StoreUnavailable
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

_MAX_KNOWN_KEYS = 1 << 16
logger = logging.getLogger(__name__)


@dataclass
class _Fetch:
    first_block: int
    future: Future
    deadline: float  # time.monotonic() after which the request stops waiting for it
    num_agreed: int | None = None  # tensor parallelism: the blocks every rank has fetched


class RemoteTier:
    name = "remote"

    def __init__(
        self,
        backend: StorageBackend,
        block_format: BlockFormat,
        device: KVPool,
        host: HostPool,
        model_path: str,
        block_size: int,
        timeout_s: float,
        tp: tuple[int, int] = (1, 0),
        max_pending_blocks: int = 64,
    ):
        self.backend = backend
        self.format = block_format
        self.device = device
        self.host = host
        self.block_size = block_size
        self.timeout_s = timeout_s
        self.max_pending_blocks = max_pending_blocks
        self.dtype = device.k_buffers[0].dtype
        # k and v of a block: [num_layers, block_size, *per-token shape]
        self.block_shape = (device.num_layers, block_size, *device.k_buffers[0].shape[1:])
        self._model_path = model_path
        self._tp = tp
        self.fingerprint: str | None = None  # set once the KV layout is final (FP8 calibrated)
        self._fetches: dict[str, _Fetch] = {}
        self._keys: dict[str, tuple[int, list[str]]] = {}  # rid -> (num tokens, block keys)
        self._known: OrderedDict[str, None] = OrderedDict()
        self._known_generation = backend.generation
        self._pending: set[str] = set()
        self._work = BackgroundWork("remote")
        self._lock = threading.Lock()
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="radixgate-hicache-remote-read")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="radixgate-hicache-remote-write")
        self.num_backup_tokens = 0
        self.num_read_failures = 0  # values that failed a check
        self.num_write_failures = 0  # blocks whose write the store did not take
        self.num_writes_dropped = 0  # blocks not sent: the store was down or the queue full
        self.num_fetch_timeouts = 0  # requests that stopped waiting for a read
        self._read_failure_log = RateLimitedLog()
        self._store_error_log = RateLimitedLog()
        self.mirror: TierMirror | None = None  # tensor parallelism: the same reads and writes on ranks 1..N-1

    def ready_fingerprint(self) -> str | None:
        if self.fingerprint is None and not kv_needs_calibration(self.device):
            self.fingerprint = kv_fingerprint(self._model_path, self.device, *self._tp)
        return self.fingerprint

    # ---- reads (engine thread) ----------------------------------------------------------------
    def match(self, rid: str, tokens: Sequence[int], namespace: Hashable, num_in_memory: int) -> TierMatch:
        """The remote part of a prefix past the `num_in_memory` tokens found on device, host and
        disk: its blocks once fetched, loading while they are being fetched (the request waits), a
        miss when the store has nothing more or took longer than `timeout_s`."""
        fingerprint = self.ready_fingerprint()
        if fingerprint is None:
            return MISS
        bs = self.block_size
        f = self._fetches.get(rid)
        if f is None:
            cached = self._keys.get(rid)
            if cached is None or cached[0] != len(tokens):
                keys = self.format.chain_keys(list(tokens), namespace, fingerprint, bs)
                cached = self._keys[rid] = (len(tokens), keys)
            first = num_in_memory // bs
            if first >= len(cached[1]) or not self.backend.is_up:
                return MISS
            future = self._reader.submit(self._fetch, cached[1][first:])
            self._work.track(future)
            self._fetches[rid] = _Fetch(first, future, time.monotonic() + self.timeout_s)
            if self.mirror is not None:
                self.mirror.prefetch("remote", rid, cached[1][first:])
            return LOADING
        if not f.future.done():
            if time.monotonic() < f.deadline:
                return LOADING
            if f.deadline != float("inf"):
                f.deadline = float("inf")  # given up on; counted once
                self.num_fetch_timeouts += 1
            return MISS
        if f.deadline == float("inf") or f.future.cancelled():
            return MISS
        if f.future.exception() is not None:  # a store fault costs the hit, never the engine loop
            logger.warning("HiCache remote read failed: %r", f.future.exception())
            f.deadline = float("inf")
            return MISS
        blocks = f.future.result()
        if self.mirror is not None:  # a block missing or damaged on any rank is a miss on every rank
            blocks = self.mirror.agreed("remote", rid, f, blocks)
        return read_result(f.first_block, bs, blocks, num_in_memory)

    def _fetch(self, keys: list[str]) -> list[Block]:
        """Reader thread: the leading stored blocks of `keys`, checked; stops at the first miss."""
        try:
            present = self.backend.exists(keys)
            n = next((i for i, p in enumerate(present) if not p), len(keys))
            values = self.backend.get(keys[:n]) if n else []
        except StoreUnavailable as e:
            self._store_error_log.warning(logger, "HiCache remote tier: reading blocks failed: %s", e)
            return []
        blocks = []
        header = {"fingerprint": self.fingerprint}
        for key, value in zip(keys, values, strict=False):
            block = None
            if value is not None:
                block = self.format.decode(value, {**header, "key": key}, self.dtype, self.block_shape)
            if block is None:
                if value is not None:  # None: evicted between the two calls
                    self.num_read_failures += 1
                    self._read_failure_log.warning(
                        logger,
                        "HiCache remote tier: the value at %s is damaged, truncated, for another model or not "
                        "written with this cache secret; a miss (%d so far)",
                        getattr(self.backend, "key_prefix", "") + key,
                        self.num_read_failures,
                    )
                break
            blocks.append(block)
            self._remember(key)
        return blocks

    def read_async(self, keys: list[str]) -> Future:
        """Ranks 1..N-1: fetches the leading stored blocks of `keys` on the reader thread, after every
        write queued before (rank 0 saw its own write finish; this rank's may lag)."""
        future = read_after_writes(self._writer, self._reader, self._fetch, keys)
        self._work.track(future)
        return future

    def wait(self, timeout: float) -> None:
        """Blocks until some fetch finishes (or `timeout`), when the loop has nothing else to run."""
        pending = [f.future for f in self._fetches.values() if not f.future.done()]
        if pending:
            wait(pending, timeout=timeout, return_when="FIRST_COMPLETED")

    def forget(self, rid: str) -> None:
        """The request was admitted, finished or aborted: drops its fetch and keys."""
        f = self._fetches.pop(rid, None)
        if f is not None:
            f.future.cancel()  # not started yet: never runs
        self._keys.pop(rid, None)

    # ---- writes -------------------------------------------------------------------------------
    def _is_known(self, key: str) -> bool:
        with self._lock:
            if self.backend.generation != self._known_generation:
                self._known.clear()  # an outage: the store may have restarted empty
                self._known_generation = self.backend.generation
            return key in self._known

    def _remember(self, key: str) -> None:
        with self._lock:
            self._known[key] = None
            self._known.move_to_end(key)
            if len(self._known) > _MAX_KNOWN_KEYS:
                self._known.popitem(last=False)

    def write_path(self, path: list[TreeNode], namespace: Hashable) -> int:
        """Queues the full blocks of the tokens along `path` (root first) not known to be stored;
        returns how many leading tokens of the path the store will then hold (0: nothing queued)."""
        fingerprint = self.ready_fingerprint()
        if fingerprint is None:
            return 0
        bs = self.block_size
        keys = self.format.chain_keys([t for n in path for t in n.key], namespace, fingerprint, bs)
        todo = self._to_send(keys)
        if not todo:
            return 0
        where = path_slots(path)
        blocks = [(keys[j], where[j * bs : (j + 1) * bs]) for j in todo]
        self._queue(blocks)
        if self.mirror is not None:
            self.mirror.write("remote", blocks)
        # Blocks before the last one queued are stored, pending or queued now: the store will hold them all.
        return (todo[-1] + 1) * bs

    def write_blocks(self, blocks: list[tuple[str, Where]]) -> None:
        """Ranks 1..N-1: queues the blocks (key, where its tokens' KV is) not known to be stored."""
        self._queue([blocks[j] for j in self._to_send([key for key, _ in blocks])])

    def _to_send(self, keys: list[str]) -> list[int]:
        """Indices of the keys neither pending nor known to be stored, as many as the queue has room for."""
        with self._lock:
            pending = set(self._pending)
        todo = [j for j, key in enumerate(keys) if key not in pending and not self._is_known(key)]
        room = max(self.max_pending_blocks - len(pending), 0) if self.backend.is_up else 0
        self.num_writes_dropped += max(0, len(todo) - room)
        return todo[:room]

    def _queue(self, blocks: list[tuple[str, Where]]) -> None:
        if not blocks:
            return
        gathered = [(key, *gather_kv(self.device, self.host, where)) for key, where in blocks]
        with self._lock:
            self._pending.update(key for key, _ in blocks)
        self._work.track(self._writer.submit(self._send, gathered))

    def _send(self, blocks: list[tuple[str, torch.Tensor, torch.Tensor]]) -> None:
        """Writer thread: encodes and stores the blocks in one round trip."""
        try:
            header = {"fingerprint": self.fingerprint}
            items = [(key, b"".join(self.format.encode({**header, "key": key}, k, v))) for key, k, v in blocks]
            self.backend.set(items)
            for key, _, _ in blocks:
                self._remember(key)
            self.num_backup_tokens += len(blocks) * self.block_size
        except StoreUnavailable as e:
            self.num_write_failures += len(blocks)  # costs hits on other workers, never an answer
            self._store_error_log.warning(
                logger,
                "HiCache remote tier: writing %d blocks failed: %s; %d write failures so far",
                len(blocks),
                e,
                self.num_write_failures,
            )
        finally:
            with self._lock:
                self._pending.difference_update(key for key, _, _ in blocks)

    # ---- lifecycle ----------------------------------------------------------------------------
    def drain(self, timeout: float = 30.0) -> None:
        """Waits for every background read and write to finish (each is bounded by the store's timeout)."""
        self._work.drain(timeout)

    def check_idle(self) -> None:
        assert not self._fetches, f"{len(self._fetches)} remote fetches held while idle"
        self.drain()
        assert not self._pending, "remote writes still pending while idle"

    def stats(self) -> dict[str, object]:
        return {
            "hicache_remote_backend": self.backend.name,
            "hicache_remote_up": int(self.backend.is_up),
            "hicache_remote_outages": self.backend.generation,
            "hicache_backup_tokens_remote": self.num_backup_tokens,
            "hicache_remote_read_failures": self.num_read_failures,
            "hicache_remote_write_failures": self.num_write_failures,
            "hicache_remote_writes_dropped": self.num_writes_dropped,
            "hicache_remote_fetch_timeouts": self.num_fetch_timeouts,
        }

    def close(self) -> None:
        """Finishes queued writes (each bounded by the store's timeout), stops the threads."""
        self._reader.shutdown(wait=True, cancel_futures=True)
        self._writer.shutdown(wait=True)
        self.backend.close()
