"""Rank 0's side of tensor parallelism: starts ranks 1..N-1, hands them every step's batch, checks
they are alive, stops them.

Rank 0 runs the whole engine (scheduler, radix cache, page allocator, slot table): one scheduler
decides for every rank and the slot indices it hands out address the same slots in every rank's
KV pool, each pool holding that rank's KV heads."""

from __future__ import annotations

import multiprocessing
import time
import weakref
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import NoReturn

import torch

from ..config import EngineConfig
from ..runner.attention import ForwardContext
from .group import TPGroup
from .layers import ParallelLlamaForCausalLM
from .rank_worker import pack_batch, rank_device, rank_main
from .shard_loader import load_shard

STARTUP_TIMEOUT_S = 600.0  # loading a shard of a large checkpoint
STOP_TIMEOUT_S = 5.0


class TensorParallel:
    """`tp = TensorParallel(config, path)` spawns ranks 1..N-1, which load their shards meanwhile;
    `model, scales = tp.load_model()` is rank 0's shard; `tp.start_ranks(num_slots)` once the pool's
    size is known; `tp.shutdown()` when the engine stops (or when `tp` is dropped, at the latest)."""

    def __init__(self, config: EngineConfig, path: str):
        self.config, self.path = config, path
        self.device = rank_device(config.device, 0)
        self.group = TPGroup(0, config.tp_size, 0, self.device)
        self.processes: list[BaseProcess] = []
        self.conns: list[Connection] = []
        self._finalizer = weakref.finalize(self, _stop_ranks, self.processes, self.conns, self.group)
        spawn = multiprocessing.get_context("spawn")
        for rank in range(1, config.tp_size):
            parent_end, child_end = spawn.Pipe()
            process = spawn.Process(
                target=rank_main,
                args=(config, path, rank, self.group.port, child_end),
                name=f"radixgate-tp-rank{rank}",
                daemon=True,
            )
            process.start()
            child_end.close()  # so that a rank dying closes the pipe for rank 0
            self.processes.append(process)
            self.conns.append(parent_end)

    def load_model(self) -> tuple[ParallelLlamaForCausalLM, dict[str, torch.Tensor]]:
        cfg = self.config
        model, kv_scales = load_shard(self.path, 0, cfg.tp_size, cfg.torch_dtype, self.device, self.group)
        model.before_forward = self.broadcast_batch
        model.on_collective_error = self.explain_failure
        return model, kv_scales

    def start_ranks(self, num_slots: int) -> None:
        """Sizes every rank's KV pool, waits until each is ready, then joins the group."""
        try:
            for rank, conn in enumerate(self.conns, start=1):
                self._send(rank, conn, num_slots)
            for rank, conn in enumerate(self.conns, start=1):
                self._wait_ready(rank, conn)
            self.group.connect()
        except BaseException:
            self.shutdown()
            raise

    def send_all(self, message: object, best_effort: bool = False) -> None:
        """The same message through every rank's pipe (a HiCache move, between step headers).
        `best_effort`: a rank that is gone is skipped (what the message would drop died with it)."""
        for rank, conn in enumerate(self.conns, start=1):
            try:
                self._send(rank, conn, message)
            except RuntimeError:
                if not best_effort:
                    raise

    def ask_all(self, message: object) -> list[object]:
        """Sends `message` to every rank and returns each one's answer, in rank order. Waits at most the
        collectives' timeout for each; a rank that dies or stays silent fails the engine loudly."""
        self.send_all(message)
        return [self._answer(rank, conn) for rank, conn in enumerate(self.conns, start=1)]

    def _answer(self, rank: int, conn: Connection) -> object:
        timeout_s = self.group.timeout.total_seconds()
        deadline = time.monotonic() + timeout_s
        process = self.processes[rank - 1]
        while not conn.poll(0.05):  # not check_alive(): the other ranks' answers make their pipes readable
            if not process.is_alive():
                self._died(rank, process)
            if time.monotonic() > deadline:
                raise RuntimeError(f"tensor-parallel rank {rank} did not answer in {timeout_s:g} s: the engine stops")
        try:
            return conn.recv()
        except EOFError:  # its pipe closed: it died without answering
            self._died(rank, process)

    def _send(self, rank: int, conn: Connection, message: object) -> None:
        try:
            conn.send(message)
        except OSError as e:
            process = self.processes[rank - 1]
            process.join(0.5)  # its pipe broke: it is most likely gone
            if not process.is_alive():
                self._died(rank, process)
            raise RuntimeError(f"tensor-parallel rank {rank} cannot be reached: {e}") from e

    def _wait_ready(self, rank: int, conn: Connection) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        process = self.processes[rank - 1]
        while not conn.poll(0.2):
            if not process.is_alive():
                raise RuntimeError(f"tensor-parallel rank {rank} exited with code {process.exitcode} while starting")
            if time.monotonic() > deadline:
                raise RuntimeError(f"tensor-parallel rank {rank} did not load its shard in {STARTUP_TIMEOUT_S:.0f} s")
        status, detail = conn.recv()
        if status != "ready":
            raise RuntimeError(f"tensor-parallel rank {rank} failed to start:\n{detail}")

    def check_alive(self) -> None:
        """Raises RuntimeError naming the first rank that has died. Once ready, a rank sends nothing but
        the answers `ask_all` reads at once, so its pipe turning readable means it closed: the process
        is gone even before it is reaped."""
        for rank, (process, conn) in enumerate(zip(self.processes, self.conns, strict=True), start=1):
            if not process.is_alive() or conn.poll():
                self._died(rank, process)

    @staticmethod
    def _died(rank: int, process: BaseProcess) -> NoReturn:
        process.join(1.0)
        raise RuntimeError(
            f"tensor-parallel rank {rank} (pid {process.pid}) died (exit code {process.exitcode}): "
            "the engine cannot continue; restart it"
        )

    def broadcast_batch(
        self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext, sample_indices: torch.Tensor
    ) -> None:
        """Called by rank 0's model before its own forward: every rank runs the same step."""
        self.check_alive()
        ctx.cascade = None  # every rank runs the same kernels: the plain paged decode
        header, payload = pack_batch(input_ids, positions, ctx, sample_indices)
        for rank, conn in enumerate(self.conns, start=1):
            self._send(rank, conn, tuple(header))
        self.group.broadcast(payload)

    def explain_failure(self, error: BaseException) -> None:
        """After a collective failed on rank 0: raises the clearer error when a rank has died."""
        time.sleep(0.2)  # the dead rank's pipe closes with it; give the kernel a moment to say so
        try:
            self.check_alive()
        except RuntimeError as dead:
            raise dead from error
        if "timed out" in str(error).lower():
            seconds = self.group.timeout.total_seconds()
            raise RuntimeError(
                f"a tensor-parallel collective timed out after {seconds:g} s: a rank stopped answering "
                "(RADIXGATE_TP_TIMEOUT_S sets the limit); the engine cannot continue"
            ) from error

    def shutdown(self) -> None:
        """Stops every rank: asks, waits STOP_TIMEOUT_S, then kills. Idempotent."""
        self._finalizer()


def _stop_ranks(processes: list[BaseProcess], conns: list[Connection], group: TPGroup) -> None:
    for conn in conns:
        try:
            conn.send(None)
        except OSError:
            pass  # that rank is already gone
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(STOP_TIMEOUT_S)
    for conn in conns:
        conn.close()
    group.close()
