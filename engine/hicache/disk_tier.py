"""The disk tier's background work for HiCache: prefetching blocks for waiting requests on a reader
thread and writing blocks behind the engine loop on a writer thread.

The engine thread calls everything here except `_read_blocks` / `_write_block`. KV to be written is
copied out of the pools on the engine thread first, so no pool page is held while a write waits;
read blocks stay in CPU memory until the request they were read for is admitted or leaves.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..kvcache.kv_pool import KVPool
from ..kvcache.radix_cache import TreeNode
from .disk_store import DiskStore
from .host_pool import HostPool

if TYPE_CHECKING:
    from ..distributed.tier_mirror import TierMirror

Where = list[tuple[bool, int]]  # (on device, slot) of each token of a block


@dataclass
class DiskLoad:
    """Blocks read for a request, holding its prompt tokens [start, start + num_tokens), where
    start is `offset` tokens into the first block (the part before is already in memory)."""

    blocks: list[tuple[torch.Tensor, torch.Tensor]]  # (k, v): [num_layers, block_size, ...] each
    offset: int
    num_tokens: int


@dataclass
class _Prefetch:
    first_block: int
    future: Future
    num_agreed: int | None = None  # tensor parallelism: the blocks every rank has read


class DiskIO:
    def __init__(self, store: DiskStore, device: KVPool, host: HostPool, model_path: str, tp: tuple[int, int] = (1, 0)):
        self.disk_store = store
        self._tp = tp  # (tp_size, rank): a rank's KV holds its own heads
        self.device = device
        self.host = host
        self._model_path = model_path
        self._prefetches: dict[str, _Prefetch] = {}
        self._keys: dict[str, tuple[int, list[str]]] = {}  # rid -> (num tokens, block keys)
        self._pending_writes: set[str] = set()
        self._futures: list[Future] = []
        self._lock = threading.Lock()
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="radixgate-hicache-prefetch")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="radixgate-hicache-write")
        self.num_backup_tokens = 0
        self.num_write_failures = 0
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

    # ---- reads --------------------------------------------------------------------------------
    def match(self, rid: str, tokens: Sequence[int], namespace: Hashable, num_in_memory: int) -> DiskLoad | bool | None:
        """The disk part of a prefix past the `num_in_memory` tokens found on device and host:
        a DiskLoad once its blocks are read, True while they are being read (the request waits),
        None when the disk has nothing more."""
        store = self.ready_store
        if store is None:
            return None
        bs = store.block_size
        cached = self._keys.get(rid)
        if cached is None or cached[0] != len(tokens):
            cached = self._keys[rid] = (len(tokens), store.block_keys(list(tokens), namespace))
        keys = cached[1]
        num_blocks = store.num_cached_blocks(keys)
        p = self._prefetches.get(rid)
        if p is None:
            if num_blocks * bs <= num_in_memory:
                return None
            first = num_in_memory // bs
            future = self._reader.submit(self._read_blocks, keys[first:num_blocks])
            self._track(future)
            self._prefetches[rid] = _Prefetch(first, future)
            if self.mirror is not None:
                self.mirror.prefetch("disk", rid, keys[first:num_blocks])
            return True
        if not p.future.done():
            return True
        blocks = p.future.result()
        if self.mirror is not None:  # a block missing or damaged on any rank is a miss on every rank
            blocks = self.mirror.agreed("disk", rid, p, blocks)
        start = p.first_block * bs
        end = start + len(blocks) * bs
        if start > num_in_memory or end <= num_in_memory:
            return None
        return DiskLoad(blocks, num_in_memory - start, end - num_in_memory)

    def _read_blocks(self, keys: list[str]) -> list[tuple[torch.Tensor, torch.Tensor]]:
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
        self._track(future)
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
    def write_path(self, path: list[TreeNode], namespace: Hashable) -> None:
        """Queues the full blocks of the tokens along `path` (root first) that the disk lacks."""
        store = self.ready_store
        if store is None:
            return
        keys = store.block_keys([t for n in path for t in n.key], namespace)
        todo = [j for j, key in enumerate(keys) if key not in self._pending_writes and key not in store]
        if not todo:
            return
        where = path_slots(path)
        bs = store.block_size
        blocks = [(keys[j], where[j * bs : (j + 1) * bs]) for j in todo]
        self.write_blocks(blocks)
        if self.mirror is not None:
            self.mirror.write("disk", blocks)

    def write_blocks(self, blocks: list[tuple[str, Where]]) -> None:
        """Queues the blocks (key, where its tokens' KV is) that are neither stored nor queued."""
        for key, where in blocks:
            if key in self._pending_writes or key in self.disk_store:
                continue
            k, v = gather_kv(self.device, self.host, where)
            self._pending_writes.add(key)
            self._track(self._writer.submit(self._write_block, key, k, v))

    def _write_block(self, key: str, k: torch.Tensor, v: torch.Tensor) -> None:
        try:
            self.disk_store.put(key, k, v)
            self.num_backup_tokens += self.disk_store.block_size
        except OSError:
            self.num_write_failures += 1  # a full or read-only disk costs hits, never answers
        finally:
            with self._lock:
                self._pending_writes.discard(key)

    def _track(self, future: Future) -> None:
        with self._lock:
            self._futures = [f for f in self._futures if not f.done()] + [future]

    # ---- lifecycle ----------------------------------------------------------------------------
    def drain(self, timeout: float = 30.0) -> None:
        """Waits for every background read and write to finish."""
        with self._lock:
            futures = list(self._futures)
        _, not_done = wait(futures, timeout=timeout)
        assert not not_done, f"{len(not_done)} HiCache disk operations still running after {timeout}s"

    def check_idle(self) -> None:
        assert not self._prefetches, f"{len(self._prefetches)} disk prefetches held while idle"
        self.drain()
        assert not self._pending_writes, "disk writes still pending while idle"
        # Engines started later on the same directory (a restart within one process) add files.
        self.disk_store.check_consistency(sole_writer=False)

    def close(self) -> None:
        """Finishes queued writes (so a restart finds them) and stops the threads."""
        self._reader.shutdown(wait=True)
        self._writer.shutdown(wait=True)


def gather_kv(device: KVPool, host: HostPool, where: list[tuple[bool, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """KV of tokens on the device (True) or the host (False): k, v [num_layers, n, ...] on the CPU."""
    ks: list[list[torch.Tensor]] = []
    vs: list[list[torch.Tensor]] = []
    for on_device, run in itertools.groupby(where, key=lambda w: w[0]):
        slots = [s for _, s in run]
        if on_device:
            k, v = device.read(torch.tensor(slots, dtype=torch.int64, device=device.device))
        else:
            k, v = host.read(slots)
        ks.append([x.cpu() for x in k])
        vs.append([x.cpu() for x in v])
    return (
        torch.stack([torch.cat(layer) for layer in zip(*ks, strict=False)]),
        torch.stack([torch.cat(layer) for layer in zip(*vs, strict=False)]),
    )


def copy_to_device(
    device: KVPool,
    host: HostPool,
    dst_slots: list[int],
    host_slots: list[int],
    reads: tuple[DiskLoad | None, ...],
) -> None:
    """Host KV, then each read's blocks (disk, remote), into device slots `dst_slots`, in that order."""
    h = len(host_slots)
    dev = device.device
    if h:
        ks, vs = host.read(host_slots)
        idx = torch.tensor(dst_slots[:h], dtype=torch.int64, device=dev)
        # Synchronous on purpose: once unlocked, these host pages may be rewritten in this same step.
        device.write(idx, [k.to(dev) for k in ks], [v.to(dev) for v in vs])
    start = h
    for blocks in reads:
        if blocks is None or not blocks.num_tokens:
            continue
        k = torch.cat([b[0] for b in blocks.blocks], dim=1)[:, blocks.offset : blocks.offset + blocks.num_tokens]
        v = torch.cat([b[1] for b in blocks.blocks], dim=1)[:, blocks.offset : blocks.offset + blocks.num_tokens]
        idx = torch.tensor(dst_slots[start : start + blocks.num_tokens], dtype=torch.int64, device=dev)
        device.write(idx, [x.to(dev) for x in k.unbind(0)], [x.to(dev) for x in v.unbind(0)])
        start += blocks.num_tokens


def path_slots(path: list[TreeNode]) -> list[tuple[bool, int]]:
    """(on device, slot) of every token along `path`, root first; device KV preferred over host."""
    out: list[tuple[bool, int]] = []
    for n in path:
        if n.device_slots is not None:
            out.extend((True, s) for s in n.device_slots)
        else:
            assert n.host_slots is not None, "a node on the path is on neither tier"
            out.extend((False, s) for s in n.host_slots)
    return out


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


def read_after_writes(writer: ThreadPoolExecutor, reader: ThreadPoolExecutor, read: Callable, keys: list) -> Future:
    """`read(keys)` on the reader thread, once every write queued before on `writer` (one thread) is done."""
    written = writer.submit(lambda: None)

    def run() -> list[tuple[torch.Tensor, torch.Tensor]]:
        written.result()
        return read(keys)

    return reader.submit(run)
