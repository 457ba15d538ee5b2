"""Ranks 1..N-1: a process that holds its shard of the weights and of the KV pool and runs the
forward rank 0 broadcasts, step after step, until rank 0 says stop or goes away.

Per step, rank 0 sends a small header through the rank's pipe (a rank waiting for work blocks on
its pipe, not on a collective, so an idle engine never hits the collectives' timeout, and the pipe
closing tells the rank that rank 0 is gone), then broadcasts the batch as one int64 tensor."""

from __future__ import annotations

import os
import traceback
from multiprocessing.connection import Connection
from typing import NamedTuple

import torch

from ..config import EngineConfig, num_threads
from ..kvcache.kv_pool import KVPool
from ..runner.attention import AttentionBackend, ForwardContext, create_backend
from .group import TPGroup
from .layers import ParallelLlamaForCausalLM, local_kv_heads
from .shard_loader import load_shard
from .tier_mirror import RankTiers, TierOp


class StepHeader(NamedTuple):
    """The sizes of the batch tensor that follows."""

    is_decode: bool
    num_tokens: int  # T
    num_reqs: int  # B
    num_kv: int
    num_sampled: int


def pack_batch(
    input_ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext, sample_indices: torch.Tensor
) -> tuple[StepHeader, torch.Tensor]:
    """Everything the ranks need for one forward, as a header and one int64 tensor."""
    header = StepHeader(
        ctx.is_decode,
        int(input_ids.numel()),
        int(ctx.qo_indptr.numel()) - 1,
        int(ctx.kv_indices.numel()),
        int(sample_indices.numel()),
    )
    parts = (input_ids, positions, ctx.out_slots, ctx.qo_indptr, ctx.kv_indptr, ctx.kv_indices, sample_indices)
    return header, torch.cat([p.reshape(-1).to(torch.int64) for p in parts])


def unpack_batch(
    header: StepHeader, payload: torch.Tensor, backend: AttentionBackend
) -> tuple[torch.Tensor, torch.Tensor, ForwardContext, torch.Tensor]:
    t, b = header.num_tokens, header.num_reqs
    sizes = [t, t, t, b + 1, b + 1, header.num_kv, header.num_sampled]
    input_ids, positions, out_slots, qo_indptr, kv_indptr, kv_indices, sample_indices = payload.split(sizes)
    ctx = ForwardContext(backend, header.is_decode, out_slots, qo_indptr, kv_indptr, kv_indices)
    return input_ids, positions, ctx, sample_indices


def rank_device(device: str, rank: int) -> str:
    """Rank r of an engine on cuda:k runs on cuda:k+r; on the CPU every rank is on the CPU."""
    if not device.startswith("cuda"):
        return device
    base = int(device.split(":")[1]) if ":" in device else 0
    return f"cuda:{base + rank}"


def rank_main(config: EngineConfig, path: str, rank: int, port: int, conn: Connection) -> None:
    """The rank process's entry point (spawned by `TensorParallel`): loads its shard while rank 0
    loads its own, then sizes its KV pool with the slot count rank 0 sends."""
    threads = num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        device = rank_device(config.device, rank)
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
        group = TPGroup(rank, config.tp_size, port, device)
        model, kv_scales = load_shard(path, rank, config.tp_size, config.torch_dtype, device, group)
        mc = model.full_config
        num_slots = conn.recv()
        if num_slots is None:  # rank 0 failed to start the engine and stops its ranks
            return
        kv_heads = local_kv_heads(mc, config.tp_size)
        pool = KVPool(num_slots, mc.num_layers, kv_heads, mc.head_dim, config.kv_torch_dtype, device, kv_scales)
        backend = create_backend(config.attention_backend, pool)
        tiers = RankTiers(config, pool, path, rank) if config.enable_hicache else None
        conn.send(("ready", None))
        group.connect()
    except EOFError:
        return  # rank 0 went away before the pool was sized
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))  # rank 0 raises it, naming this rank
        except OSError:
            pass  # rank 0 is gone too
        os._exit(1)
    try:
        serve_steps(model, backend, group, conn, tiers)
    except EOFError:
        pass  # rank 0 is gone: nothing left to serve
    finally:
        if tiers is not None:
            tiers.close()  # finishes the queued disk writes, so a restart finds them
        group.close()
    os._exit(0)  # nothing to flush: skip the interpreter's slow teardown of torch, so shutdown is quick


@torch.inference_mode()
def serve_steps(
    model: ParallelLlamaForCausalLM,
    backend: AttentionBackend,
    group: TPGroup,
    conn: Connection,
    tiers: RankTiers | None,
) -> None:
    while True:
        message = conn.recv()
        if message is None:  # rank 0's shutdown
            return
        if isinstance(message, TierOp):  # a HiCache move, made in the order rank 0 made it
            assert tiers is not None, f"HiCache move {message.name!r} on a rank without HiCache"
            tiers.run(message, conn)
            continue
        header = StepHeader(*message)
        size = 3 * header.num_tokens + 2 * (header.num_reqs + 1) + header.num_kv + header.num_sampled
        payload = group.broadcast(torch.empty(size, dtype=torch.int64, device=group.device))
        input_ids, positions, ctx, sample_indices = unpack_batch(header, payload, backend)
        model(input_ids, positions, ctx, sample_indices)
