"""What HiCache's storage tiers below host memory have in common: the disk tier (`disk_tier.py`) and
the remote tier (`remote_tier.py`) hold the same blocks (`block_format.py`), read them for waiting
requests on a reader thread and write them behind the engine loop on a writer thread.

The engine thread calls `match`, `write_path`, `forget` and the lifecycle methods; KV to be written
is copied out of the pools on the engine thread first, so no pool page is held while a write waits;
read blocks stay in CPU memory until the request they were read for is admitted or leaves.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from ..kvcache.kv_pool import KVPool
from ..kvcache.radix_cache import TreeNode
from .block_format import Block
from .host_pool import HostPool

if TYPE_CHECKING:
    from ..distributed.tier_mirror import TierMirror

Where = list[tuple[bool, int]]  # (on device, slot) of each token of a block


@dataclass(frozen=True)
class ReadBlocks:
    """Blocks read for a request, holding its prompt tokens [start, start + num_tokens), where
    start is `offset` tokens into the first block (the part before is already in memory)."""

    blocks: list[Block]
    offset: int
    num_tokens: int


@dataclass(frozen=True)
class TierMatch:
    """What a storage tier holds of a request's prefix past the part in memory: `blocks` once read,
    `is_loading` while they are being read (the request waits), neither when the tier has nothing
    more (`MISS`)."""

    blocks: ReadBlocks | None = None
    is_loading: bool = False

    def __post_init__(self) -> None:
        assert not (self.is_loading and self.blocks is not None), "a match is read or loading, not both"


MISS = TierMatch()
LOADING = TierMatch(is_loading=True)


class StorageTier(Protocol):
    """A tier below host memory (disk, remote store), as the tier controller and, under tensor
    parallelism, the other ranks use it."""

    name: str  # "disk" | "remote"
    mirror: TierMirror | None  # tensor parallelism: rank 0's moves made on ranks 1..N-1

    def ready_fingerprint(self) -> str | None:
        """The fingerprint naming this rank's blocks, None until the KV layout is final."""
        ...

    def match(self, rid: str, tokens: Sequence[int], namespace: Hashable, num_in_memory: int) -> TierMatch:
        """The tier's part of a prefix past the `num_in_memory` tokens found above it."""
        ...

    def write_path(self, path: list[TreeNode], namespace: Hashable) -> int:
        """Queues the full blocks of the tokens along `path` (root first) the tier lacks; returns
        how many leading tokens of the path the tier will then hold (0: nothing queued)."""
        ...

    def write_blocks(self, blocks: list[tuple[str, Where]]) -> None:
        """Ranks 1..N-1: queues the blocks (key, where its tokens' KV is) the tier lacks."""
        ...

    def read_async(self, keys: list[str]) -> Future:
        """Ranks 1..N-1: reads the leading stored blocks of `keys`, after every write queued before."""
        ...

    def wait(self, timeout: float) -> None:
        """Blocks until some read finishes (or `timeout`), when the loop has nothing else to run."""
        ...

    def forget(self, rid: str) -> None:
        """The request was admitted, finished or aborted: drops its read and keys."""
        ...

    def drain(self, timeout: float = 30.0) -> None: ...

    def check_idle(self) -> None: ...

    def stats(self) -> dict[str, object]: ...

    def close(self) -> None: ...


class BackgroundWork:
    """The futures of a tier's background reads and writes, so that `drain` can wait for all of them."""

    def __init__(self, tier: str):
        self._tier = tier
        self._lock = threading.Lock()
        self._futures: list[Future] = []

    def track(self, future: Future) -> None:
        with self._lock:
            self._futures = [f for f in self._futures if not f.done()] + [future]

    def drain(self, timeout: float) -> None:
        with self._lock:
            futures = list(self._futures)
        _, not_done = wait(futures, timeout=timeout)
        assert not not_done, f"{len(not_done)} HiCache {self._tier} operations still running after {timeout}s"


class RateLimitedLog:
    """Logs one line per `interval_s` for a fault that may repeat on every block (a full disk, a
    store down, forged values): the first at once, later ones with how many were not logged."""

    def __init__(self, interval_s: float = 30.0):
        self.interval_s = interval_s
        self._next = 0.0
        self._suppressed = 0

    def warning(self, logger: logging.Logger, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        if self._suppressed:
            message += f" ({self._suppressed} more like it not logged in the last {self.interval_s:.0f}s)"
        self._next, self._suppressed = now + self.interval_s, 0
        logger.warning(message, *args)


def gather_kv(device: KVPool, host: HostPool, where: Where) -> tuple[torch.Tensor, torch.Tensor]:
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
    reads: tuple[ReadBlocks | None, ...],
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


def path_slots(path: list[TreeNode]) -> Where:
    """(on device, slot) of every token along `path`, root first; device KV preferred over host."""
    out: Where = []
    for n in path:
        if n.device_slots is not None:
            out.extend((True, s) for s in n.device_slots)
        else:
            assert n.host_slots is not None, "a node on the path is on neither tier"
            out.extend((False, s) for s in n.host_slots)
    return out


def read_after_writes(writer: ThreadPoolExecutor, reader: ThreadPoolExecutor, read: Callable, keys: list) -> Future:
    """`read(keys)` on the reader thread, once every write queued before on `writer` (one thread) is done."""
    written = writer.submit(lambda: None)

    def run() -> list[Block]:
        written.result()
        return read(keys)

    return reader.submit(run)


def read_result(start_block: int, block_size: int, blocks: list[Block], num_in_memory: int) -> TierMatch:
    """The match of a finished read of `blocks` from block `start_block`: the part past memory, if any."""
    start = start_block * block_size
    end = start + len(blocks) * block_size
    if start > num_in_memory or end <= num_in_memory:
        return MISS
    return TierMatch(ReadBlocks(blocks, num_in_memory - start, end - num_in_memory))
