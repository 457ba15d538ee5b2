"""The prefill worker's bootstrap server: where decode workers connect, prove the worker key,
agree on the KV layout, and register a room (the `bootstrap_room` both roles were given for one
request) with what their own cache already holds. The prefill side then claims the room
(`wait_room`) and streams the KV over that connection.

A room can also fail before anything is registered in it, and then its waiter is woken with the
reason instead of waiting out `timeout_s`: the decode worker that names the room in its handshake is
refused (layout, backend), or the prefill's request goes away (`cancel_room`: its router saw the
decode side fail first). A registration that arrives for a failed room is refused.

Bound to 127.0.0.1 unless a host is given. Registrations nobody claims, and failed rooms nobody
waits for, are dropped after `timeout_s` (a registration's connection closed, so the decode side
releases what it reserved)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .layout import HandshakeError, KVLayout, TransferError
from .wire import authenticate_as_server, expect, send_msg

logger = logging.getLogger(__name__)


def tokens_digest(input_ids: list[int], cache_salt: str | None) -> str:
    """Both roles must hold the same prompt under the same tenant namespace."""
    h = hashlib.sha256(repr(cache_salt).encode() + b"|")
    h.update(",".join(map(str, input_ids)).encode())
    return h.hexdigest()


@dataclass
class Registration:
    """A decode worker waiting for one room's KV on `sock`: it holds the first `prefix_len` of the
    prompt's `num_tokens` tokens and reserved pages for the rest."""

    room: int
    sock: socket.socket
    prefix_len: int
    num_tokens: int
    digest: str
    descriptor: dict[str, Any]
    arrived: float = field(default_factory=time.monotonic)


class BootstrapServer:
    def __init__(
        self,
        layout: KVLayout,
        key: bytes,
        backend_name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        timeout_s: float = 30.0,
    ):
        if not key:
            raise ValueError("the bootstrap server needs the worker key: it authenticates every decode worker")
        self.layout, self.key, self.backend_name, self.timeout_s = layout, key, backend_name, timeout_s
        self._listener = socket.create_server((host, port), reuse_port=False)
        self.host, self.port = host, self._listener.getsockname()[1]
        self._rooms: dict[int, Registration] = {}  # registered, not claimed yet
        self._claimed: dict[int, Registration] = {}  # claimed by `wait_room`, until `release`
        self._failed: dict[int, tuple[Exception, float]] = {}  # room -> why it failed, and when
        self._cond = threading.Condition()
        self._closed = False
        self.num_refused = 0
        self._thread = threading.Thread(target=self._accept_loop, name="radixgate-bootstrap", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), name="radixgate-bootstrap-conn", daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        room = None
        try:
            authenticate_as_server(sock, self.key)
            hello = expect(sock, "handshake")
            room = int(hello["room"]) if hello.get("room") is not None else None
            if hello.get("backend") != self.backend_name:
                raise HandshakeError(
                    f"transfer backend {hello.get('backend')!r} on the decode worker, {self.backend_name!r} here: "
                    "give both the same --disaggregation-transfer-backend"
                )
            self.layout.check_peer(KVLayout.from_dict(hello.get("layout")))
            send_msg(sock, {"op": "handshake_ok"})
            reg = expect(sock, "register")
            registration = Registration(
                int(reg["room"]),
                sock,
                int(reg["prefix_len"]),
                int(reg["num_tokens"]),
                str(reg["digest"]),
                dict(reg["descriptor"]),
            )
        except (HandshakeError, TransferError, OSError, KeyError, TypeError, ValueError) as e:
            self._refuse(sock, e, room)
            return
        with self._cond:
            self._expire()
            failed = self._failed.get(registration.room)
            if failed is None:
                old = self._rooms.pop(registration.room, None)
                if old is not None:
                    old.sock.close()
                self._rooms[registration.room] = registration
                self._cond.notify_all()
        if failed is not None:
            self._refuse(sock, TransferError(f"bootstrap_room {registration.room} failed: {failed[0]}"), None)

    def _refuse(self, sock: socket.socket, error: Exception, room: int | None) -> None:
        """Tells the decode worker why, and fails `room` (when known) for the prefill waiting on it."""
        self.num_refused += 1
        logger.warning("bootstrap: refused a decode worker: %s", error)
        if room is not None and isinstance(error, HandshakeError):
            self.fail_room(room, error)
        try:
            kind = "handshake" if isinstance(error, HandshakeError) else "transfer"
            send_msg(sock, {"op": "error", "kind": kind, "message": str(error)})
        except OSError:
            pass
        sock.close()

    def _expire(self) -> None:
        now = time.monotonic()
        for room in [r for r, g in self._rooms.items() if now - g.arrived > self.timeout_s]:
            self._rooms.pop(room).sock.close()
        for room in [r for r, (_, at) in self._failed.items() if now - at > self.timeout_s]:
            del self._failed[room]

    def fail_room(self, room: int, error: Exception) -> bool:
        """Fails the room: its waiter raises `error` now, a registration waiting in it is dropped (its
        decode worker sees the connection close and releases), and a later one is refused. A claimed
        room's connection is shut, so the prefill serving it fails at its next send; True then."""
        with self._cond:
            self._expire()
            self._failed[room] = (error, time.monotonic())
            registration = self._rooms.pop(room, None)
            if registration is not None:
                registration.sock.close()
            claimed = self._claimed.get(room)
            if claimed is not None:
                with contextlib.suppress(OSError):
                    claimed.sock.shutdown(socket.SHUT_RDWR)
            self._cond.notify_all()
            return claimed is not None

    def wait_room(self, room: int, timeout_s: float | None = None) -> Registration:
        """Claims the room's registration (until `release`); TransferError when no decode worker
        registers it in time, or the room's failure (`fail_room`) as soon as it fails."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        with self._cond:
            while room not in self._rooms:
                if room in self._failed:  # kept until it expires: a late registration is refused
                    raise self._failed[room][0]
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise TransferError(f"no decode worker registered bootstrap_room {room} in time")
                self._cond.wait(left)
            self._claimed[room] = registration = self._rooms.pop(room)
            return registration

    def release(self, room: int) -> None:
        """The claimed room's transfer ended (either way)."""
        with self._cond:
            self._claimed.pop(room, None)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._cond:
            for reg in self._rooms.values():
                reg.sock.close()
            self._rooms.clear()
            self._cond.notify_all()
