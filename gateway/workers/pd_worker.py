"""A `radixgate serve --disaggregation-mode prefill|decode` worker: the co-located engine plus its
role in a prefill/decode pair (engine/disagg/).

A request without bootstrap fields is served here in full, as by any co-located worker. With
them (`GenerateRequest.bootstrap`, checked by api/bootstrap_fields.py), a prefill worker prefills
and hands the KV to the decode worker registered for the room, answering with the first token; a
decode worker receives that KV from the named prefill worker's bootstrap server and streams the
whole answer. A router sends the same request to both (sglang-router does so in its PD mode)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from radixgate.engine.protocol import GenerateRequest, StreamDelta

from ..api.errors import APIError
from .worker import LocalWorker, normalized

if TYPE_CHECKING:
    from radixgate.engine.engine import Engine

MODES = ("null", "prefill", "decode")
BACKENDS = ("tcp", "shm")


@dataclass(frozen=True)
class DisaggConfig:
    """SGLang's `--disaggregation-*` flags, and the prefill bootstrap addresses a decode worker may
    connect to (`--disaggregation-prefill-bootstrap HOST:PORT`)."""

    mode: str = "null"
    transfer_backend: str = "tcp"
    bootstrap_host: str = "127.0.0.1"
    bootstrap_port: int = 8998
    prefill_bootstraps: tuple[str, ...] = ()
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--disaggregation-mode must be one of {MODES}, got {self.mode!r}")
        if self.transfer_backend not in BACKENDS:
            raise ValueError(f"--disaggregation-transfer-backend must be one of {BACKENDS}")
        for address in self.prefill_bootstraps:
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"--disaggregation-prefill-bootstrap wants HOST:PORT, got {address!r}")

    @property
    def is_enabled(self) -> bool:
        return self.mode != "null"


def transfer_key(worker_key: str | None) -> bytes:
    """What authenticates the KV channel: the worker key, else the deployment's configured cache
    secret (both roles must hold the same); neither is a startup error."""
    from radixgate.engine.cache_secret import load_cache_secret

    if worker_key:
        return worker_key.encode()
    secret = load_cache_secret()
    if not secret.is_configured:
        raise ValueError(
            "--disaggregation-mode needs a key both roles share for the KV channel: the worker key "
            "(--worker-api-key-file) or a cache secret (--cache-secret-file)"
        )
    return secret.derive("disaggregation channel")


class DisaggWorker(LocalWorker):
    def __init__(self, engine: Engine, config: DisaggConfig, key: bytes) -> None:
        super().__init__(engine)
        from radixgate.engine.disagg.decode import DecodeSide
        from radixgate.engine.disagg.prefill import PrefillSide

        self.disaggregation = config
        self.prefill_side = self.decode_side = None
        if config.mode == "prefill":
            self.prefill_side = PrefillSide(
                engine,
                key,
                config.transfer_backend,
                config.bootstrap_host,
                config.bootstrap_port,
                config.timeout_s,
            )
        else:
            self.decode_side = DecodeSide(engine, key, config.transfer_backend, timeout_s=config.timeout_s)
        self._allowed = {_normal(a) for a in config.prefill_bootstraps}

    def refuses_bootstrap(self, host: str, port: int) -> str | None:
        """Why this worker will not take a request naming the prefill bootstrap host:port (None: it will)."""
        if self.decode_side is not None and _normal(f"{host}:{port}") not in self._allowed:
            allowed = ", ".join(sorted(self._allowed)) or "none"
            flag = "--disaggregation-prefill-bootstrap"
            return f"{host}:{port} is not a registered prefill bootstrap address ({flag}: {allowed})"
        return None

    def stream(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        if request.bootstrap is None:
            return super().stream(request)
        return self._handoff(request)

    async def _handoff(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        """A failed handoff is this request's 503, not the engine's: a router keeps the worker in its
        pool and may try another prefill worker. The code says how far it got: `kv_reservation_failed`
        (a decode worker with no room for it: no prefill worker was contacted), `kv_handshake_failed`,
        `kv_transfer_failed` (the peer failed, went away or timed out)."""
        from radixgate.engine.disagg.decode import ReservationError
        from radixgate.engine.disagg.layout import HandshakeError, TransferError

        deltas = self._prefill(request) if self.prefill_side is not None else self._decode(request)
        try:
            async with contextlib.aclosing(deltas) as stream:
                async for delta in stream:
                    yield delta
        except (HandshakeError, TransferError) as exc:
            code = "kv_handshake_failed" if isinstance(exc, HandshakeError) else "kv_transfer_failed"
            code = "kv_reservation_failed" if isinstance(exc, ReservationError) else code
            raise APIError(503, str(exc), code=code, type="server_error") from None

    async def _prefill(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        assert self.prefill_side is not None and (boot := request.bootstrap) is not None
        side = self.prefill_side
        work = asyncio.to_thread(
            side.prefill, boot.room, request.input_ids, normalized(request.sampling), request.cache_salt, request.rid
        )
        try:
            result = await work
        except asyncio.CancelledError:  # the router (or client) went away: no decode worker may ever come
            side.cancel(boot.room, request.rid)
            raise
        yield StreamDelta(list(result.output.token_ids), result.output.text, True, result.output)

    async def _decode(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        from radixgate.engine.bridge import asyncio_listener

        assert self.decode_side is not None and (boot := request.bootstrap) is not None
        deltas: asyncio.Queue[StreamDelta] = asyncio.Queue()
        side = self.decode_side
        started = asyncio.ensure_future(
            asyncio.to_thread(
                side.start,
                boot.room,
                boot.host,
                boot.port,
                request.input_ids,
                normalized(request.sampling),
                request.cache_salt,
                request.rid,
                asyncio_listener(deltas),
            )
        )
        try:
            req, _ = await asyncio.shield(started)
        except asyncio.CancelledError:  # the router went away while the KV was on the way
            side.cancel(request.rid)
            started.add_done_callback(self._abort_if_started)
            raise
        finished = False
        try:
            while not finished:
                delta = await deltas.get()
                finished = delta.finished
                yield delta
        finally:
            if not finished:
                self.engine.abort(req.rid)

    def _abort_if_started(self, started: asyncio.Future) -> None:
        """A cancelled handoff whose KV had already arrived: its decoding has no reader."""
        if not started.cancelled() and started.exception() is None:
            self.engine.abort(started.result()[0].rid)

    def stats(self) -> dict[str, Any]:
        side: Any = self.prefill_side or self.decode_side
        counters = {k: v for k, v in vars(side).items() if k.startswith("num_")}
        if self.prefill_side is not None:
            counters["bootstrap_port"] = self.prefill_side.bootstrap_port
        return {**super().stats(), "disaggregation_mode": self.disaggregation.mode, "disaggregation": counters}

    def close(self) -> None:
        if self.prefill_side is not None:
            self.prefill_side.close()
        if self.decode_side is not None:
            self.decode_side.close()
        super().close()


def _normal(address: str) -> str:
    host, _, port = address.rpartition(":")
    host = "127.0.0.1" if host in ("localhost", "[::1]", "::1") else host
    return f"{host}:{int(port)}"
