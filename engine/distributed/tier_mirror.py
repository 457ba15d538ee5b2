"""HiCache under tensor parallelism: rank 0 decides every move between the tiers, every rank makes
it on its own KV heads.

Each rank keeps its own host pool (the size of rank 0's: rank 0's host slots address every rank's),
its own disk files and its own remote-store keys. Rank 0's HiCache calls `TierMirror` at each move
it makes, and the mirror sends the same move, as a `TierOp`, through each rank's pipe, in order
with the step headers: a rank makes the moves in the order rank 0 made them, so a device page is
copied to the host before the step that overwrites it, and KV loaded for a request is in place
before the forward that reads it.

| rank 0 (HiCache)                     | op         | ranks 1..N-1 (`RankTiers`)                     |
|--------------------------------------|------------|------------------------------------------------|
| device -> host copy (backup, demote) | `to_host`  | the same slots                                 |
| disk / remote blocks queued to write | `write`    | the same tokens' KV, under the rank's own keys |
| disk / remote read started           | `prefetch` | reads the rank's own blocks                    |
| that read finished                   | `agree`    | answers how many blocks it read (rank 0 waits) |
| host / read blocks -> device (admit) | `load`     | the same slots, from its own host and blocks   |
| request admitted or gone             | `forget`   | drops its read blocks                          |

Host eviction, freeing and flushing are bookkeeping on rank 0 alone (a freed host slot's data is
simply overwritten later). A disk or remote read can come up shorter on one rank than on rank 0
(a damaged, evicted or not yet written block): `agree` takes the fewest blocks any rank read, so
every rank loads the same prefix and the rest is recomputed everywhere, as on one device.

A block's key on rank r is `rank_key(fingerprint_r, key_0)`: rank 0 sends its own key, each rank
derives its own from it with its fingerprint (which names tp_size and the rank)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import torch

from ..config import EngineConfig, tp_timeout_s
from ..hicache.block_format import rank_key
from ..hicache.storage_tier import ReadBlocks, Where, copy_to_device
from ..hicache.tier_controller import TierController
from ..hicache.tiers import build_tiers
from ..kvcache.kv_pool import KVPool

if TYPE_CHECKING:
    from .tensor_parallel import TensorParallel

logger = logging.getLogger(__name__)
T = TypeVar("T")
Read = tuple[int, int] | None  # (offset, num_tokens) of a request's read blocks that a load copies


class TierOp(NamedTuple):
    """A HiCache move for ranks 1..N-1 (sent through each rank's pipe between step headers)."""

    name: str
    args: tuple


class TierMirror:
    """Rank 0's side: sends each of HiCache's moves to ranks 1..N-1 (see the module's table)."""

    def __init__(self, tp: TensorParallel):
        self.tp = tp
        self.reading: set[str] = set()  # requests with reads on the ranks

    def to_host(self, device_slots: Sequence[int], host_slots: list[int]) -> None:
        self.tp.send_all(TierOp("to_host", (list(device_slots), host_slots)))

    def write(self, tier: str, blocks: list[tuple[str, Where]]) -> None:
        self.tp.send_all(TierOp("write", (tier, blocks)))

    def prefetch(self, tier: str, rid: str, keys: list[str]) -> None:
        self.reading.add(rid)
        self.tp.send_all(TierOp("prefetch", (tier, rid, keys)))

    def agree(self, tier: str, rid: str, num_blocks: int) -> int:
        """The leading blocks that rank 0 (`num_blocks`) and every other rank have read."""
        answers = [num_blocks]
        for n in self.tp.ask_all(TierOp("agree", (tier, rid))):
            assert isinstance(n, int), f"a rank answered {n!r} to agree"
            answers.append(n)
        return min(answers)

    def agreed(self, tier: str, rid: str, read: Any, blocks: list[T]) -> list[T]:
        """`blocks`, rank 0's finished read, cut to the leading blocks every rank has read; the ranks
        are asked once per read (`read.num_agreed` keeps the answer)."""
        if read.num_agreed is None:
            read.num_agreed = self.agree(tier, rid, len(blocks))
        return blocks[: read.num_agreed]

    def load(
        self, rid: str, dst_slots: list[int], host_slots: list[int], disk: ReadBlocks | None, remote: ReadBlocks | None
    ) -> None:
        reads = tuple(None if r is None or not r.num_tokens else (r.offset, r.num_tokens) for r in (disk, remote))
        if host_slots or any(reads):
            self.tp.send_all(TierOp("load", (rid, dst_slots, host_slots, reads)))

    def forget(self, rid: str) -> None:
        if rid in self.reading:
            self.reading.discard(rid)
            self.tp.send_all(TierOp("forget", (rid,)), best_effort=True)  # also while a failed engine shuts down


def attach_mirror(hicache: TierController, tp: TensorParallel) -> None:
    """Makes rank 0's HiCache mirror its moves on the other ranks."""
    mirror = TierMirror(tp)
    hicache.mirror = mirror
    for io in (hicache.disk_tier, hicache.remote_tier):
        if io is not None:
            io.mirror = mirror


class RankTiers:
    """Ranks 1..N-1: this rank's host pool, disk and remote tiers, moved as rank 0's `TierOp`s say."""

    def __init__(self, config: EngineConfig, pool: KVPool, model_path: str, rank: int):
        self.device = pool
        self.host, self.disk_tier, self.remote_tier = build_tiers(config, pool, model_path, rank)
        self.reads: dict[tuple[str, str], Future] = {}  # (tier, rid) -> its blocks being read
        self.agree_timeout_s = tp_timeout_s()

    def run(self, op: TierOp, conn: Connection) -> None:
        """Makes the move; `agree` answers through `conn`."""
        if op.name == "agree":
            conn.send(self.agree(*op.args))
        else:
            getattr(self, op.name)(*op.args)

    def to_host(self, device_slots: list[int], host_slots: list[int]) -> None:
        ks, vs = self.device.read(torch.tensor(device_slots, dtype=torch.int64, device=self.device.device))
        self.host.write(host_slots, ks, vs)

    def _fingerprint(self, tier: str) -> str:
        io = self.disk_tier if tier == "disk" else self.remote_tier
        assert io is not None, f"rank 0 has a {tier} tier this rank lacks"
        fingerprint = io.ready_fingerprint()
        # rank 0 moves blocks only once its KV layout is final, and every rank's became final in the same step
        assert fingerprint, f"rank 0 moved {tier} blocks before this rank's KV layout was final"
        return fingerprint

    def write(self, tier: str, blocks: list[tuple[str, Where]]) -> None:
        fingerprint = self._fingerprint(tier)
        mine = [(rank_key(fingerprint, key), where) for key, where in blocks]
        io = self.disk_tier if tier == "disk" else self.remote_tier
        assert io is not None
        io.write_blocks(mine)

    def prefetch(self, tier: str, rid: str, keys: list[str]) -> None:
        fingerprint = self._fingerprint(tier)
        mine = [rank_key(fingerprint, key) for key in keys]
        io = self.disk_tier if tier == "disk" else self.remote_tier
        assert io is not None
        self.reads[(tier, rid)] = io.read_async(mine)

    def agree(self, tier: str, rid: str) -> int:
        """How many leading blocks this rank read for the request (0 if the read failed or is late)."""
        future = self.reads[(tier, rid)]
        remote = self.remote_tier
        timeout = remote.timeout_s if tier == "remote" and remote is not None else self.agree_timeout_s
        try:
            return len(future.result(timeout))
        except Exception as e:  # late or failed: a store fault costs the hit on every rank, never the step
            logger.warning("HiCache %s read on a tensor-parallel rank failed: %r", tier, e)
            return 0

    def _blocks(self, tier: str, rid: str, read: Read) -> ReadBlocks | None:
        if read is None:
            return None
        offset, num_tokens = read
        blocks = self.reads[(tier, rid)].result()
        assert sum(k.shape[1] for k, _ in blocks) >= offset + num_tokens, f"rank 0 loads {tier} blocks this rank lacks"
        return ReadBlocks(blocks, offset, num_tokens)

    def load(self, rid: str, dst_slots: list[int], host_slots: list[int], reads: tuple[Read, Read]) -> None:
        disk, remote = self._blocks("disk", rid, reads[0]), self._blocks("remote", rid, reads[1])
        copy_to_device(self.device, self.host, dst_slots, host_slots, (disk, remote))

    def forget(self, rid: str) -> None:
        for tier in ("disk", "remote"):
            future = self.reads.pop((tier, rid), None)
            if future is not None:
                future.cancel()

    def close(self) -> None:
        """Finishes the queued writes (a restart finds them), stops the threads."""
        for io in (self.disk_tier, self.remote_tier):
            if io is not None:
                io.close()
