"""The prefill role: run a prompt's prefill on this engine (its radix cache serving what it
holds), then stream the KV of every token from the decode worker's matched prefix to the end,
and the first sampled token, to the decode worker registered for the request's room.

The KV is read out of the pool just before the finished request's pages go back to the tree
(`CacheManager.before_release`), so the tail past the last full page travels too."""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from dataclasses import dataclass

import torch

from ..bridge import AddRequest
from ..engine import Engine
from ..models.tiny import TINY_NAME, ensure_tiny_checkpoint
from ..protocol import GenerateOutput, SamplingParams
from ..scheduler.request import Req
from .bootstrap import BootstrapServer, Registration, tokens_digest
from .layout import KVLayout, TransferError, model_fingerprint, pack_kv, set_when_finished
from .transfer import make_backend, send_chunk
from .wire import expect, send_msg

DEFAULT_CHUNK_BYTES = 4 << 20


def engine_layout(engine: Engine) -> KVLayout:
    if engine.config.tp_size != 1:
        raise ValueError("prefill/decode disaggregation runs with tp_size 1: the KV of other ranks is not sent")
    path = ensure_tiny_checkpoint() if engine.config.model_path == TINY_NAME else engine.config.model_path
    return KVLayout.of(engine.pool, engine.config.page_size, model_fingerprint(path))


@dataclass
class _Export:
    start: int  # first prompt token whose KV is sent (the decode worker's matched prefix)
    kv: torch.Tensor | None = None  # uint8, token-major, tokens [start, prompt end)


@dataclass
class PrefillResult:
    output: GenerateOutput  # the first token; cached_tokens as this worker's cache served them
    start: int  # tokens the decode worker already held (not sent)
    num_sent_tokens: int
    num_sent_bytes: int


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
        engine.start()
        engine.cache_manager.before_release = self._export

    @property
    def bootstrap_port(self) -> int:
        return self.server.port

    def _export(self, req: Req) -> None:
        """On the engine loop, before the request's pages are released: copy its prompt's KV out."""
        job = self._exports.get(req.rid)
        n = len(req.origin_input_ids)
        if job is None or req.finish_reason not in ("length", "stop") or req.error or req.num_computed < n:
            return  # not ours, retracted, aborted or failed: nothing to send
        pool, row = self.engine.pool, req.table_row()
        job.kv = pack_kv(pool, self.engine.slot_table.read(row, job.start, n))

    def _run(self, rid: str, input_ids: list[int], sampling: SamplingParams, cache_salt: str | None) -> GenerateOutput:
        done = threading.Event()
        req = self.engine._make_req(input_ids, sampling, cache_salt, rid, set_when_finished(done))
        self.engine._inbox.put(AddRequest(req))
        if not done.wait(self.timeout_s * 4):
            self.engine.abort(rid)
            raise TransferError(f"the prefill of {len(input_ids)} tokens did not finish in time")
        assert req.result is not None
        return req.result

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
        reg = self.server.wait_room(room)
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
            reg.sock.close()

    def _serve(
        self, reg: Registration, rid: str, input_ids: list[int], sampling: SamplingParams, cache_salt: str | None
    ) -> PrefillResult:
        if reg.digest != tokens_digest(input_ids, cache_salt) or reg.num_tokens != len(input_ids):
            raise TransferError(f"bootstrap_room {reg.room}: the decode worker holds another prompt or tenant")
        if not 0 <= reg.prefix_len <= len(input_ids) or reg.prefix_len % self.layout.page_size:
            raise TransferError(f"bootstrap_room {reg.room}: prefix_len {reg.prefix_len} is not a page boundary")
        self._exports[rid] = job = _Export(reg.prefix_len)
        try:
            output = self._run(rid, input_ids, dataclasses.replace(sampling, max_new_tokens=1), cache_salt)
        finally:
            self._exports.pop(rid, None)
        if output.finish_reason not in ("length", "stop") or job.kv is None:
            raise TransferError(f"the prefill ended with {output.finish_reason}: {output.error or 'aborted'}")
        data = memoryview(job.kv.numpy().data)
        pool = self.engine.pool
        header = {"op": "kv", "nbytes": len(data), "cached_tokens": output.cached_tokens}
        send_msg(reg.sock, {**header, "k_scales": list(pool.k_scales), "v_scales": list(pool.v_scales)})
        sender = self.backend.sender(reg.sock, reg.descriptor, len(data))
        try:
            step = self.chunk_tokens * self.layout.token_bytes
            for offset in range(0, len(data), step):
                send_chunk(sender, offset, data[offset : offset + step])
            send_msg(reg.sock, {"op": "done", "first_token": output.token_ids[0], "finish": output.finish_reason})
            expect(reg.sock, "ack")
        finally:
            sender.close()
        num_tokens = len(input_ids) - reg.prefix_len
        self.num_transfers += 1
        self.num_sent_bytes += len(data)
        self.num_sent_tokens += num_tokens
        return PrefillResult(output, reg.prefix_len, num_tokens, len(data))

    def close(self) -> None:
        self.engine.cache_manager.before_release = None
        self.server.close()
        self.backend.close()
