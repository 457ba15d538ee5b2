"""The prefill role: run a prompt's prefill on this engine (its radix cache serving what it
holds), then stream the KV of every token from the decode worker's matched prefix to the end,
and the first sampled token, to the decode worker registered for the request's room.

The KV is read out of the pool on the engine loop after each chunk of a chunked prefill
(`CacheManager.after_chunk`), and sent from the caller's thread while the next chunk computes; the
rest just before the finished request's pages go back to the tree (`CacheManager.before_release`),
so the tail past the last full page travels too. The first token, the prefill's cached tokens and
the FP8 scales follow the last chunk."""

from __future__ import annotations

import dataclasses
import itertools
import os
import queue
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..bridge import AddRequest
from ..engine import Engine
from ..models.tiny import TINY_NAME, ensure_tiny_checkpoint
from ..protocol import GenerateOutput, SamplingParams
from ..scheduler.request import Req
from .bootstrap import BootstrapServer, Registration, tokens_digest
from .layout import KVLayout, TransferError, model_fingerprint, pack_kv
from .transfer import make_backend
from .wire import expect, send_msg

DEFAULT_CHUNK_BYTES = 4 << 20


def engine_layout(engine: Engine) -> KVLayout:
    if engine.config.tp_size != 1:
        raise ValueError("prefill/decode disaggregation runs with tp_size 1: the KV of other ranks is not sent")
    path = ensure_tiny_checkpoint() if engine.config.model_path == TINY_NAME else engine.config.model_path
    return KVLayout.of(engine.pool, engine.config.page_size, model_fingerprint(path))


@dataclass
class _Export:
    """One request's KV on its way out: runs of tokens [first, first + len) packed on the engine
    loop as the prefill computes them, sent from the caller's thread; None once the request ended."""

    start: int  # first prompt token whose KV is sent (the decode worker's matched prefix)
    packed: int = 0  # tokens [start, packed) are queued already
    runs: queue.Queue[tuple[int, torch.Tensor] | None] = field(default_factory=queue.Queue)
    num_early_runs: int = 0  # runs packed before the prefill's last chunk (sent while it computes)


@dataclass
class PrefillResult:
    output: GenerateOutput  # the first token; cached_tokens as this worker's cache served them
    start: int  # tokens the decode worker already held (not sent)
    num_sent_tokens: int
    num_sent_bytes: int
    num_early_runs: int = 0  # runs of its KV sent while later chunks of its prefill computed


class PrefillSide:
    """Owns the bootstrap server and the engine hook; `prefill` is called once per request, from
    any thread but the engine loop's."""

    def __init__(
        self,
        engine: Engine,
        key: bytes,
        backend_name: str = "tcp",
        host: str = "127.0.0.1",
        port: int = 0,
        timeout_s: float = 30.0,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ):
        self.engine, self.timeout_s = engine, timeout_s
        self.layout = engine_layout(engine)
        self.backend = make_backend(backend_name)
        self.server = BootstrapServer(self.layout, key, backend_name, host, port, timeout_s)
        self.chunk_tokens = max(1, chunk_bytes // self.layout.token_bytes)
        self._exports: dict[str, _Export] = {}
        self._rids = itertools.count()
        self.num_transfers = self.num_sent_bytes = self.num_sent_tokens = self.num_active = 0
        self.num_waiting = 0  # requests waiting for their room's decode worker to register
        self.num_early_runs = 0  # runs of KV sent while their prefill still computed later chunks
        engine.start()
        engine.cache_manager.before_release = self._export
        engine.cache_manager.after_chunk = self._chunk

    @property
    def bootstrap_port(self) -> int:
        return self.server.port

    def _pack(self, job: _Export, req: Req, end: int) -> None:
        if end > job.packed:
            slots = self.engine.slot_table.read(req.table_row(), job.packed, end)
            job.runs.put((job.packed, pack_kv(self.engine.pool, slots)))
            job.packed = end

    def _chunk(self, req: Req) -> None:
        """On the engine loop, after a chunk of a chunked prefill: its KV goes out while the next
        chunk computes."""
        job = self._exports.get(req.rid)
        if job is not None and req.num_computed > job.packed:
            self._pack(job, req, min(req.num_computed, len(req.origin_input_ids)))
            job.num_early_runs += 1

    def _export(self, req: Req) -> None:
        """On the engine loop, before the request's pages are released: the rest of its prompt's KV."""
        job = self._exports.get(req.rid)
        n = len(req.origin_input_ids)
        if job is None or req.finish_reason not in ("length", "stop") or req.error or req.num_computed < n:
            return  # not ours, retracted, aborted or failed: the sender sees the KV incomplete
        self._pack(job, req, n)

    def _start(self, job: _Export, rid: str, input_ids: list[int], sampling: SamplingParams, cache_salt: str | None):
        """Adds the request; its listener ends `job.runs` once the request finished (after its
        release, so after the last run)."""

        def listener(req: Any, delta: Any) -> None:
            if delta.finished:
                job.runs.put(None)

        req = self.engine._make_req(input_ids, sampling, cache_salt, rid, listener)
        self.engine._inbox.put(AddRequest(req))
        return req

    def prefill(
        self,
        room: int,
        input_ids: list[int],
        sampling: SamplingParams,
        cache_salt: str | None = None,
        rid: str | None = None,
    ) -> PrefillResult:
        """Waits for the room's decode worker, prefills, streams the KV past its prefix, and
        returns once the decode worker acknowledged it. TransferError when any of that fails
        (the decode worker is told, and releases its pages)."""
        self.engine.validate(input_ids, sampling)
        self.num_waiting += 1
        try:
            reg = self.server.wait_room(room)
        finally:
            self.num_waiting -= 1
        self.num_active += 1
        try:
            return self._serve(reg, rid or f"prefill-{os.getpid()}-{next(self._rids)}", input_ids, sampling, cache_salt)
        except Exception as e:
            try:
                send_msg(reg.sock, {"op": "error", "message": f"prefill failed: {e}"})
            except OSError:
                pass
            if isinstance(e, OSError):
                raise TransferError(f"the decode worker went away mid-transfer: {e}") from e
            raise
        finally:
            self.num_active -= 1
            self.server.release(room)
            reg.sock.close()

    def cancel(self, room: int, rid: str) -> None:
        """The request went away (its router saw the decode side fail, or its client left): `prefill`
        stops waiting for the room, or, with the room claimed, its transfer's connection is shut and
        its prefill aborted, so it fails at once and the decode side releases. A no-op once done."""
        if self.server.fail_room(room, TransferError(f"the request for bootstrap_room {room} was cancelled")):
            self.engine.abort(rid)

    def _serve(
        self, reg: Registration, rid: str, input_ids: list[int], sampling: SamplingParams, cache_salt: str | None
    ) -> PrefillResult:
        if reg.digest != tokens_digest(input_ids, cache_salt) or reg.num_tokens != len(input_ids):
            raise TransferError(f"bootstrap_room {reg.room}: the decode worker holds another prompt or tenant")
        if not 0 <= reg.prefix_len <= len(input_ids) or reg.prefix_len % self.layout.page_size:
            raise TransferError(f"bootstrap_room {reg.room}: prefix_len {reg.prefix_len} is not a page boundary")
        tb, n = self.layout.token_bytes, len(input_ids)
        total = (n - reg.prefix_len) * tb
        self._exports[rid] = job = _Export(reg.prefix_len, reg.prefix_len)
        req = None
        try:
            send_msg(reg.sock, {"op": "kv", "nbytes": total})
            sender = self.backend.sender(reg.sock, reg.descriptor, total)
            try:
                req = self._start(job, rid, input_ids, dataclasses.replace(sampling, max_new_tokens=1), cache_salt)
                deadline = time.monotonic() + self.timeout_s * 4
                while (run := job.runs.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
                    first, kv = run
                    data = memoryview(kv.numpy().data)
                    step = self.chunk_tokens * tb
                    for offset in range(0, len(data), step):
                        sender.put((first - reg.prefix_len) * tb + offset, data[offset : offset + step])
                output = req.result
                if output is None or output.finish_reason not in ("length", "stop") or job.packed < n:
                    why = output.error if output is not None and output.error else "aborted"
                    raise TransferError(f"the prefill ended with {output and output.finish_reason}: {why}")
                pool = self.engine.pool
                send_msg(
                    reg.sock,
                    {
                        "op": "done",
                        "first_token": output.token_ids[0],
                        "finish": output.finish_reason,
                        "cached_tokens": output.cached_tokens,
                        "k_scales": list(pool.k_scales),
                        "v_scales": list(pool.v_scales),
                    },
                )
                expect(reg.sock, "ack")
            finally:
                sender.close()
        except queue.Empty:
            raise TransferError(f"the prefill of {n} tokens did not finish in time") from None
        finally:
            self._exports.pop(rid, None)
            if req is not None and req.result is None:
                self.engine.abort(rid)  # failed mid-way: the engine drops it
        self.num_early_runs += job.num_early_runs
        num_tokens = len(input_ids) - reg.prefix_len
        self.num_transfers += 1
        self.num_sent_bytes += total
        self.num_sent_tokens += num_tokens
        return PrefillResult(output, reg.prefix_len, num_tokens, total, job.num_early_runs)

    def close(self) -> None:
        self.engine.cache_manager.before_release = self.engine.cache_manager.after_chunk = None
        self.server.close()
        self.backend.close()
