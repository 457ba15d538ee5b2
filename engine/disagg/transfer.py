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
        """The bytes of the chunk whose header just arrived, `nbytes` long from `offset`."""
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
    def __init__(self, sock: socket.socket, total_bytes: int):
        self.sock = sock
        self.buffer = bytearray(total_bytes)

    def descriptor(self) -> dict[str, Any]:
        return {"backend": "tcp"}

    def take(self, offset: int, nbytes: int) -> memoryview:
        view = memoryview(self.buffer)[offset : offset + nbytes]
        recv_exact(self.sock, view)
        return view

    def close(self, reuse: bool = False) -> None:
        pass


class TcpBackend:
    """Chunks on the control socket itself: works wherever the bootstrap port is reachable."""

    name = "tcp"

    def sender(self, sock: socket.socket, descriptor: dict[str, Any], total_bytes: int) -> ChunkSender:
        return TcpSender(sock)

    def receiver(self, sock: socket.socket, total_bytes: int) -> ChunkReceiver:
        return TcpReceiver(sock, total_bytes)

    def close(self) -> None:
        pass


def make_backend(name: str) -> TransferBackend:
    if name == "tcp":
        return TcpBackend()
    if name == "shm":
        from .shm_backend import ShmBackend

        return ShmBackend()
    raise ValueError(f"unknown disaggregation transfer backend {name!r}: choose tcp or shm")
