"""Decode steps replayed as CUDA graphs (SGLang's `--cuda-graph-max-bs`, `--disable-cuda-graph`).

A decode step launches hundreds of small kernels whose launch cost, on a GPU, is most of the
step at small batch sizes. Once its inputs live in fixed buffers, a step's work depends only on
its batch size, so it can be captured once per size and replayed with one launch.

`DecodeGraphRunner` keeps static buffers sized for `max_bs` requests: input ids, positions, the
slots receiving the new K/V, and the KV layout (`kv_indptr`, and `kv_indices` with room for
`max_bs` requests of the longest context). A batch of n requests is padded to the smallest
captured size bs >= n: each padded row decodes token 0 at position 0 over one KV token, all at a
scratch slot no request owns, and its logits are dropped (rows never mix in a decode step, so
padding cannot change the real rows). The graph of size bs is captured on first use, after the
FP8 scales (Python floats baked into the kernels) are fixed, and replayed after that.

Only the Triton attention backend is captured: the torch reference reads the longest KV length
back to the host every step. `capture=False` runs the same padded static-buffer path eagerly,
which is how the padding is tested on machines without a GPU."""

from __future__ import annotations

import logging
from typing import Any

import torch

from ..config import EngineConfig
from ..kvcache.kv_pool import KVPool
from .attention import AttentionBackend, ForwardContext

logger = logging.getLogger(__name__)


def wants_cuda_graphs(config: EngineConfig) -> bool:
    """Whether the pool needs the scratch page (the backend is known only once the pool exists)."""
    return config.device.startswith("cuda") and not config.disable_cuda_graph


def attach_decode_graphs(config: EngineConfig, runner: Any, max_context_len: int, scratch_slot: int) -> str:
    """Gives the model runner a DecodeGraphRunner when graphs can run here; returns what the
    engine's stats report under "cuda_graph"."""
    if not config.device.startswith("cuda"):
        return "off: not a CUDA device"
    if config.disable_cuda_graph:
        return "off: disable_cuda_graph"
    if config.tp_size > 1:  # each step's batch goes to the other ranks by pipe and broadcast, outside any graph
        return "off: tensor parallelism"
    if runner.backend.name != "triton":
        return f"off: the {runner.backend.name} attention backend reads KV lengths back every step"
    max_bs = config.cuda_graph_max_bs or min(64, config.max_running_requests)
    runner.decode_graphs = DecodeGraphRunner(
        runner.model, runner.backend, runner.pool, max_bs, max_context_len, scratch_slot
    )
    return f"on: decode batches up to {max_bs}"


def capture_batch_sizes(max_bs: int) -> list[int]:
    """SGLang's ladder: 1, 2, 4, 8, then every 8 up to max_bs (max_bs itself always included)."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_bs] + list(range(16, max_bs + 1, 8))
    if sizes[-1] != max_bs:
        sizes.append(max_bs)
    return sizes


class DecodeGraphRunner:
    def __init__(
        self,
        model: Any,
        backend: AttentionBackend,
        pool: KVPool,
        max_bs: int,
        max_context_len: int,
        scratch_slot: int,
        capture: bool = True,
    ):
        if max_bs < 1:
            raise ValueError(f"cuda_graph_max_bs must be at least 1, got {max_bs}")
        if capture and pool.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.model = model
        self.backend = backend
        self.pool = pool
        self.device = pool.device
        self.capture = capture
        self.batch_sizes = capture_batch_sizes(max_bs)
        self.max_bs = max_bs
        self.scratch_slot = scratch_slot
        self.kv_capacity = max_bs * max_context_len
        i64, dev = torch.int64, self.device
        self.input_ids = torch.zeros(max_bs, dtype=i64, device=dev)
        self.positions = torch.zeros(max_bs, dtype=i64, device=dev)
        self.out_slots = torch.full((max_bs,), scratch_slot, dtype=i64, device=dev)
        self.qo_indptr = torch.arange(max_bs + 1, dtype=i64, device=dev)
        self.kv_indptr = torch.arange(max_bs + 1, dtype=i64, device=dev)
        self.kv_indices = torch.full((self.kv_capacity,), scratch_slot, dtype=i64, device=dev)
        self.sample_indices = torch.arange(max_bs, dtype=i64, device=dev)
        self.graphs: dict[int, tuple[Any, torch.Tensor]] = {}  # bs -> (torch.cuda.CUDAGraph, logits buffer)
        self.mempool = torch.cuda.graph_pool_handle() if capture else None
        self.num_runs = 0  # decode steps run through the static buffers (replayed when captured)

    def padded_size(self, n: int) -> int | None:
        """The captured batch size a batch of n requests runs at, or None when n > max_bs."""
        for bs in self.batch_sizes:
            if bs >= n:
                return bs
        return None

    def can_run(self, n: int, total_kv: int) -> bool:
        """A batch of n requests over total_kv KV tokens fits the buffers, and the scales are fixed."""
        bs = self.padded_size(n)
        if bs is None or total_kv + (bs - n) > self.kv_capacity:
            return False
        return not self.capture or not any(self.pool._needs_scales)

    @torch.inference_mode()
    def run(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        out_slots: torch.Tensor,
        kv_lens: list[int],
        kv_indices: torch.Tensor,
    ) -> torch.Tensor:
        """One decode step of n = len(kv_lens) requests; returns their logits [n, vocab]."""
        n = len(kv_lens)
        bs = self.padded_size(n)
        assert bs is not None, f"batch of {n} over cuda_graph_max_bs={self.max_bs}"
        total = int(kv_indices.numel())
        self.input_ids[:n].copy_(input_ids)
        self.input_ids[n:bs].zero_()
        self.positions[:n].copy_(positions)
        self.positions[n:bs].zero_()
        self.out_slots[:n].copy_(out_slots)
        self.out_slots[n:bs].fill_(self.scratch_slot)
        indptr = [0]
        for length in kv_lens + [1] * (bs - n):  # a padded row attends to the scratch slot only
            indptr.append(indptr[-1] + length)
        self.kv_indptr[: bs + 1].copy_(torch.tensor(indptr, dtype=torch.int64), non_blocking=True)
        self.kv_indices[:total].copy_(kv_indices)
        self.kv_indices[total : total + bs - n].fill_(self.scratch_slot)
        self.num_runs += 1
        if not self.capture:
            return self._forward(bs)[:n]
        if bs not in self.graphs:
            self._capture(bs)
        graph, logits = self.graphs[bs]
        graph.replay()
        return logits[:n]

    def _forward(self, bs: int) -> torch.Tensor:
        ctx = ForwardContext(
            self.backend,
            True,
            self.out_slots[:bs],
            self.qo_indptr[: bs + 1],
            self.kv_indptr[: bs + 1],
            self.kv_indices,
        )
        logits: torch.Tensor = self.model(self.input_ids[:bs], self.positions[:bs], ctx, self.sample_indices[:bs])
        return logits

    def _capture(self, bs: int) -> None:
        """Warm up on a side stream (Triton compiles, allocator settles), then record one step."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(bs)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.mempool):
            logits = self._forward(bs)
        self.graphs[bs] = (graph, logits)
        logger.info("captured a decode CUDA graph for batch size %d", bs)
