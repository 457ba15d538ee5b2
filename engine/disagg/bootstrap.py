"""The prefill worker's bootstrap server: where decode workers connect, prove the worker key,
agree on the KV layout, and register a room (the `bootstrap_room` both roles were given for one
request) with what their own cache already holds. The prefill side then claims the room
(`wait_room`) and streams the KV over that connection.

Bound to 127.0.0.1 unless a host is given. Registrations nobody claims within `timeout_s` are
dropped and their connections closed, so the decode side releases what it reserved."""

from __future__ import annotations

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
        self._rooms: dict[int, Registration] = {}
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
        try:
            authenticate_as_server(sock, self.key)
            hello = expect(sock, "handshake")
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
            self.num_refused += 1
            logger.warning("bootstrap: refused a decode worker: %s", e)
            try:
                kind = "handshake" if isinstance(e, HandshakeError) else "transfer"
                send_msg(sock, {"op": "error", "kind": kind, "message": str(e)})
            except OSError:
                pass
            sock.close()
            return
        with self._cond:
            self._expire()
            old = self._rooms.pop(registration.room, None)
            if old is not None:
                old.sock.close()
            self._rooms[registration.room] = registration
            self._cond.notify_all()

    def _expire(self) -> None:
        now = time.monotonic()
        for room in [r for r, g in self._rooms.items() if now - g.arrived > self.timeout_s]:
            self._rooms.pop(room).sock.close()

    def wait_room(self, room: int, timeout_s: float | None = None) -> Registration:
        """Claims the room's registration; TransferError when no decode worker registers it in time."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        with self._cond:
            while room not in self._rooms:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise TransferError(f"no decode worker registered bootstrap_room {room} in time")
                self._cond.wait(left)
            return self._rooms.pop(room)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._cond:
            for reg in self._rooms.values():
                reg.sock.close()
            self._rooms.clear()
            self._cond.notify_all()
