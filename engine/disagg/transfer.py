"""How KV bytes move between the roles: the `TransferBackend` seam and the TCP backend.

The control channel (wire.py) carries every chunk's header, `{"op": "chunk", "offset", "nbytes",
"checksum"}`; a backend decides where the chunk's bytes travel. The TCP backend sends them on the same
socket after the header, so it works between machines; the shared-memory backend
(shm_backend.py) has the receiver open a segment the sender writes into, for two processes on one
host. A backend such as NIXL or Mooncake's transfer engine would plug in here: `descriptor()` is
what the decode side publishes about its receive buffer, `put` is one write into it.

Every chunk carries a 64-bit XXH3 checksum of its bytes, computed by the sender from the bytes it
sends and checked by the receiver on the bytes that landed, so a corrupt chunk fails the transfer and
is never decoded. Each backend computes it where it costs least (the shm backend while it copies),
and with calls that release the GIL (xxhash above 2 KiB), so neither role's engine loop waits on it."""

from __future__ import annotations

import socket
import threading
from typing import Any, Protocol

import xxhash

from .layout import TransferError
from .wire import recv_exact, send_msg


class ChunkSender(Protocol):
    """The prefill side's end of one transfer."""

    def put(self, offset: int, data: memoryview) -> None:
        """Writes `data` at `offset` of the receiver's buffer and announces it with its checksum
        (`checksum(data)`, in a header on the socket)."""
        ...

    def close(self) -> None: ...


class ChunkReceiver(Protocol):
    """The decode side's end of one transfer."""

    def descriptor(self) -> dict[str, Any]:
        """What the sender needs to reach this receiver's buffer (sent with the registration)."""
        ...

    def take(self, offset: int, nbytes: int) -> memoryview:
        """The bytes of the chunk whose header just arrived, `nbytes` long from `offset`; valid
        until the next `take` or `close` (a backend may land every chunk in one buffer)."""
        ...

    def close(self, reuse: bool = False) -> None:
        """`reuse`: the transfer completed, so its buffer may serve the next one."""
        ...


class TransferBackend(Protocol):
    name: str

    def sender(self, sock: socket.socket, descriptor: dict[str, Any], total_bytes: int) -> ChunkSender: ...

    def receiver(self, sock: socket.socket, total_bytes: int) -> ChunkReceiver: ...

    def close(self) -> None:
        """Frees what the backend keeps between transfers."""
        ...


def checksum(data: memoryview) -> int:
    return xxhash.xxh3_64_intdigest(data)


def receive_chunk(receiver: ChunkReceiver, header: dict[str, Any], total_bytes: int) -> tuple[int, memoryview]:
    """Takes the chunk a header announced and checks it; TransferError on a bad range or checksum."""
    offset, nbytes = int(header["offset"]), int(header["nbytes"])
    if offset < 0 or nbytes <= 0 or offset + nbytes > total_bytes:
        raise TransferError(f"chunk [{offset}, {offset + nbytes}) lies outside the {total_bytes}-byte transfer")
    data = receiver.take(offset, nbytes)
    if checksum(data) != int(header["checksum"]):
        raise TransferError(f"chunk at byte {offset} failed its checksum: the transfer was corrupted")
    return offset, data


class TcpSender:
    def __init__(self, sock: socket.socket):
        self.sock = sock

    def put(self, offset: int, data: memoryview) -> None:
        self.write(offset, data, checksum(data))

    def write(self, offset: int, data: memoryview, digest: int) -> None:
        send_msg(self.sock, {"op": "chunk", "offset": offset, "nbytes": len(data), "checksum": digest})
        self.sock.sendall(data)

    def close(self) -> None:
        pass


class TcpReceiver:
    """Lands each chunk in one chunk-sized buffer, reused chunk after chunk and, through the
    backend, transfer after transfer: the decode side writes a chunk into its pool before it takes
    the next, so a whole-transfer buffer would only cost its allocation and its pages' first faults."""

    def __init__(self, backend: TcpBackend, sock: socket.socket):
        self.backend, self.sock = backend, sock
        self.buffer = backend.take_buffer()

    def descriptor(self) -> dict[str, Any]:
        return {"backend": "tcp"}

    def take(self, offset: int, nbytes: int) -> memoryview:
        if len(self.buffer) < nbytes:
            self.buffer = bytearray(nbytes)
        view = memoryview(self.buffer)[:nbytes]
        recv_exact(self.sock, view)
        return view

    def close(self, reuse: bool = False) -> None:
        # Only this process writes the buffer (recv_into), so even a failed transfer's may serve again.
        buffer, self.buffer = self.buffer, bytearray()
        self.backend.give_back(buffer)


class TcpBackend:
    """Chunks on the control socket itself: works wherever the bootstrap port is reachable.
    Keeps a few receive buffers of finished transfers for the next ones."""

    name = "tcp"
    max_kept = 4

    def __init__(self) -> None:
        self._free: list[bytearray] = []
        self._lock = threading.Lock()

    def sender(self, sock: socket.socket, descriptor: dict[str, Any], total_bytes: int) -> ChunkSender:
        return TcpSender(sock)

    def receiver(self, sock: socket.socket, total_bytes: int) -> ChunkReceiver:
        return TcpReceiver(self, sock)

    def take_buffer(self) -> bytearray:
        with self._lock:
            return self._free.pop() if self._free else bytearray()

    def give_back(self, buffer: bytearray) -> None:
        with self._lock:
            if buffer and len(self._free) < self.max_kept:
                self._free.append(buffer)

    def close(self) -> None:
        with self._lock:
            self._free = []


def make_backend(name: str) -> TransferBackend:
    if name == "tcp":
        return TcpBackend()
    if name == "shm":
        from .shm_backend import ShmBackend

        return ShmBackend()
    raise ValueError(f"unknown disaggregation transfer backend {name!r}: choose tcp or shm")
