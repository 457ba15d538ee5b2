"""The shared-memory backend: two processes on one host. The decode side creates a segment as
large as the transfer and names it in its registration; the prefill side maps it, copies each
chunk in, then sends the chunk's header on the control socket. Only headers cross the socket."""

from __future__ import annotations

import socket
from multiprocessing import resource_tracker, shared_memory
from typing import Any

from .layout import TransferError
from .wire import send_msg

_CREATED_HERE: set[str] = set()  # segments this process's receivers created


class ShmSender:
    def __init__(self, sock: socket.socket, name: str, total_bytes: int):
        self.sock = sock
        try:
            self.segment = shared_memory.SharedMemory(name=name)
        except FileNotFoundError as e:
            raise TransferError(
                f"shared-memory segment {name!r} not found: the shm backend needs both workers on one host"
            ) from e
        # The receiver owns the segment: keep this process's tracker from unlinking it at exit
        # (unless the receiver is this process, whose tracker entry is the receiver's own).
        if name not in _CREATED_HERE:
            resource_tracker.unregister(self.segment._name, "shared_memory")  # type: ignore[attr-defined]
        if self.segment.size < total_bytes:
            self.segment.close()
            raise TransferError(f"shared-memory segment {name!r} holds {self.segment.size} bytes, not {total_bytes}")

    def put(self, offset: int, data: memoryview, crc: int) -> None:
        assert self.segment.buf is not None
        self.segment.buf[offset : offset + len(data)] = data
        send_msg(self.sock, {"op": "chunk", "offset": offset, "nbytes": len(data), "crc": crc})

    def close(self) -> None:
        self.segment.close()


class ShmReceiver:
    def __init__(self, total_bytes: int):
        self.segment = shared_memory.SharedMemory(create=True, size=max(total_bytes, 1))
        _CREATED_HERE.add(self.segment.name)

    def descriptor(self) -> dict[str, Any]:
        return {"backend": "shm", "name": self.segment.name}

    def take(self, offset: int, nbytes: int) -> memoryview:
        assert self.segment.buf is not None
        return self.segment.buf[offset : offset + nbytes]

    def close(self) -> None:
        try:
            self.segment.close()
        except BufferError:  # a view of a chunk is still alive somewhere; unlink anyway
            pass
        self.segment.unlink()
        _CREATED_HERE.discard(self.segment.name)


class ShmBackend:
    name = "shm"

    def sender(self, sock: socket.socket, descriptor: dict[str, Any], total_bytes: int) -> ShmSender:
        if descriptor.get("backend") != "shm" or not isinstance(descriptor.get("name"), str):
            raise TransferError(
                f"the decode worker uses the {descriptor.get('backend')!r} backend, this prefill worker shm: "
                "give both the same --disaggregation-transfer-backend"
            )
        return ShmSender(sock, descriptor["name"], total_bytes)

    def receiver(self, sock: socket.socket, total_bytes: int) -> ShmReceiver:
        return ShmReceiver(total_bytes)
