"""The decode role: reserve pages for what this engine's cache lacks of a prompt, receive that
KV and the first token from the prefill worker named by the request, insert it into the radix
tree, and decode.

A reservation is an admitted request outside the scheduler: it holds a slot-table row, a lock on
its matched prefix (the first `start` tokens) and pages for tokens [start, prompt end). It ends
in exactly one of two ways, both on the engine loop: `_commit` hands it to the scheduler as a
running request with its KV computed; `_cancel` releases it (`CacheManager.release`), so after
any failure every page is free or in the tree again. Chunks are written into the reserved slots
from the receiving thread as they pass their checksum: nothing else reads those slots until the
commit, and a failed transfer's pages go back free, never into the tree."""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from ..engine import Engine
from ..protocol import GenerateOutput, SamplingParams, StreamDelta
from ..scheduler.cache_manager import PrefixHit
from ..scheduler.request import Req, ReqStatus
from .bootstrap import tokens_digest
from .layout import HandshakeError, TransferError, adopt_scales, set_when_finished, write_kv
from .prefill import engine_layout
from .transfer import make_backend, receive_chunk
from .wire import authenticate_as_client, expect, recv_msg, send_msg


class ReservationError(TransferError):
    """The decode worker could not reserve pages for the request: no prefill worker was contacted."""


@dataclass
class Reservation:
    req: Req
    start: int  # prompt tokens this engine's cache already held (page-aligned, locked)
    slots: list[int]  # reserved slots of prompt tokens [start, end)


@dataclass
class TransferStats:
    start: int
    num_tokens: int
    num_bytes: int
    prefill_cached_tokens: int


class DecodeSide:
    def __init__(
        self,
        engine: Engine,
        key: bytes,
        backend_name: str = "tcp",
        connect_timeout_s: float = 10.0,
        timeout_s: float = 30.0,
    ):
        if not key:
            raise ValueError("the decode role needs the worker key: it authenticates to prefill workers")
        self.engine, self.key = engine, key
        self.layout = engine_layout(engine)
        self.backend = make_backend(backend_name)
        self.connect_timeout_s, self.timeout_s = connect_timeout_s, timeout_s
        self._rids = itertools.count()
        self.num_transfers = self.num_received_bytes = self.num_received_tokens = self.num_failed = 0
        self.num_active = 0  # reservations waiting for their KV
        self._lock = threading.Lock()
        self._socks: dict[str, socket.socket] = {}  # rid -> its transfer's connection
        self._cancelled: set[str] = set()
        engine.start()

    # ---- on the engine loop ------------------------------------------------------------------
    def _reserve(self, req: Req) -> Reservation:
        cm, n, ps = self.engine.cache_manager, len(req.origin_input_ids), self.layout.page_size
        if cm.slot_table.num_free_rows == 0:
            raise ReservationError("the decode worker runs as many requests as it can: retry later")
        hit = PrefixHit([], None)
        if cm.radix_cache is not None:
            m = cm.radix_cache.match(req.origin_input_ids, req.cache_salt)
            cm.radix_cache.inc_lock_ref(m.node)
            hit = PrefixHit(m.device_slots, m.node)
        start = len(hit.device_slots)
        if not cm.ensure_free_pages(-(-(n - start) // ps), req):
            cm.unlock(hit)
            raise ReservationError(f"the decode worker's KV pool cannot hold {n - start} more tokens: retry later")
        cm.admit(req, hit)
        cm.allocate(req, n - start)
        return Reservation(req, start, cm.slot_table.read(req.table_row(), start, n))

    def _cancel(self, res: Reservation) -> None:
        self.engine.cache_manager.release(res.req)

    def _commit(self, res: Reservation, first_token: int, kv: dict, finish: str) -> None:
        engine, req, n = self.engine, res.req, len(res.req.origin_input_ids)
        adopt_scales(engine.pool, kv["k_scales"], kv["v_scales"])
        sched = engine.scheduler
        req.num_computed, req.status = n, ReqStatus.RUNNING
        req.times["scheduled"] = time.time()
        req.cached_tokens = min(int(kv["cached_tokens"]), n)  # what the prefill worker's cache served
        sched.prefix_cache_queries += n  # this worker's own reuse: the prefix it did not receive
        sched.prefix_cache_hits += res.start
        sched.hit_tokens_by_tier["device"] += res.start
        engine._reqs[req.rid] = req
        engine.num_prompt_tokens += n
        engine.cache_manager.cache_unfinished(req)
        sched.accept_token(req, first_token)
        if finish == "stop" and req.finish_reason is None:
            req.finish_reason = "stop"  # a stop string the prefill worker matched on the first token
        if req.finish_reason is None:
            sched.running.append(req)
        engine._after_token(req)

    # ---- on the caller's thread ----------------------------------------------------------------
    def start(
        self,
        room: int,
        host: str,
        port: int,
        input_ids: list[int],
        sampling: SamplingParams,
        cache_salt: str | None = None,
        rid: str | None = None,
        on_update: Callable[[Req, StreamDelta], None] | None = None,
    ) -> tuple[Req, TransferStats]:
        """Reserves, receives the KV for `room` from the prefill worker at host:port, and hands the
        request to the engine, which then decodes it (its tokens go to `on_update`). Raises
        HandshakeError or TransferError with every reserved page released."""
        engine = self.engine
        rid = rid or f"decode-{os.getpid()}-{next(self._rids)}"
        req = engine._make_req(list(input_ids), sampling, cache_salt, rid, on_update)
        res: Reservation = engine._run_in_loop(lambda: self._reserve(req))
        self.num_active += 1
        try:
            first, kv, finish = self._receive(res, room, host, port)
            engine._run_in_loop(lambda: self._commit(res, first, kv, finish))
        except BaseException as e:
            self.num_failed += 1
            engine._run_in_loop(lambda: self._cancel(res))
            if isinstance(e, OSError):
                raise TransferError(f"the prefill worker at {host}:{port} failed mid-transfer: {e}") from e
            raise
        finally:
            self.num_active -= 1
        num_tokens, num_bytes = len(res.slots), len(res.slots) * self.layout.token_bytes
        self.num_transfers += 1
        self.num_received_bytes += num_bytes
        self.num_received_tokens += num_tokens
        return req, TransferStats(res.start, num_tokens, num_bytes, int(kv["cached_tokens"]))

    def _receive(self, res: Reservation, room: int, host: str, port: int) -> tuple[int, dict, str]:
        req, layout = res.req, self.layout
        total = len(res.slots) * layout.token_bytes
        with socket.create_connection((host, port), timeout=self.connect_timeout_s) as sock, self._watch(req.rid, sock):
            sock.settimeout(self.timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            authenticate_as_client(sock, self.key)
            # The room travels with the handshake: a prefill worker that refuses it fails the room at once.
            hello = {"op": "handshake", "room": room, "layout": layout.to_dict(), "backend": self.backend.name}
            send_msg(sock, hello)
            try:
                expect(sock, "handshake_ok")
            except TransferError as e:
                raise HandshakeError(str(e)) from e
            receiver = self.backend.receiver(sock, total)
            completed = False
            try:
                digest = tokens_digest(req.origin_input_ids, req.cache_salt)
                send_msg(
                    sock,
                    {
                        "op": "register",
                        "room": room,
                        "prefix_len": res.start,
                        "num_tokens": len(req.origin_input_ids),
                        "digest": digest,
                        "descriptor": receiver.descriptor(),
                    },
                )
                kv = expect(sock, "kv")
                if int(kv["nbytes"]) != total:
                    raise TransferError(f"the prefill worker announced {kv['nbytes']} bytes of KV, {total} expected")
                received = 0
                while (message := recv_msg(sock))["op"] == "chunk":
                    if int(message["offset"]) != received:
                        raise TransferError(f"chunk at byte {message['offset']} out of order (expected {received})")
                    offset, data = receive_chunk(receiver, message, total)
                    if offset % layout.token_bytes or len(data) % layout.token_bytes:
                        raise TransferError("a chunk does not hold whole tokens")
                    first_slot = offset // layout.token_bytes
                    slots = res.slots[first_slot : first_slot + len(data) // layout.token_bytes]
                    write_kv(self.engine.pool, slots, torch.frombuffer(data, dtype=torch.uint8))
                    del data
                    received += len(slots) * layout.token_bytes
                if message["op"] != "done" or received != total:
                    raise TransferError(f"the transfer ended after {received} of {total} bytes")
                send_msg(sock, {"op": "ack"})
                completed = True
            finally:
                receiver.close(reuse=completed)
        kv |= {k: message[k] for k in ("cached_tokens", "k_scales", "v_scales") if k in message}  # known at the end
        return int(message["first_token"]), kv, str(message.get("finish", "length"))

    @contextlib.contextmanager
    def _watch(self, rid: str, sock: socket.socket) -> Iterator[None]:
        with self._lock:
            if rid in self._cancelled:
                raise TransferError(f"request {rid} was cancelled before its KV arrived")
            self._socks[rid] = sock
        try:
            yield
        finally:
            with self._lock:
                self._socks.pop(rid, None)
                self._cancelled.discard(rid)

    def cancel(self, rid: str) -> None:
        """The request's client went away while its KV was on the way: the transfer's connection is
        shut, so `start` fails and releases the reservation (the prefill worker is told by the
        closed connection). A no-op once the KV is in."""
        with self._lock:
            sock = self._socks.get(rid)
            if sock is None:
                self._cancelled.add(rid)
                if len(self._cancelled) > 1024:  # a rid cancelled after its transfer ended: forget the oldest
                    self._cancelled.pop()
                return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.backend.close()

    def generate(
        self,
        room: int,
        host: str,
        port: int,
        input_ids: list[int],
        sampling: SamplingParams,
        cache_salt: str | None = None,
    ) -> tuple[GenerateOutput, TransferStats]:
        """`start`, then waits for the whole output (tests, benchmarks)."""
        done = threading.Event()
        req, stats = self.start(room, host, port, input_ids, sampling, cache_salt, None, set_when_finished(done))
        if not done.wait(self.timeout_s * 4):
            self.engine.abort(req.rid)
            raise TransferError("decoding did not finish in time")
        assert req.result is not None
        return req.result, stats
