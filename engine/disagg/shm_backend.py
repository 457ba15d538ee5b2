"""The shared-memory backend: two processes on one host. The decode side creates a segment as
large as the transfer and names it in its registration; the prefill side maps it, copies each
chunk in, then sends the chunk's header on the control socket. Only headers cross the socket.

The sender copies a chunk piece by piece and hashes each piece of its source right after copying
it, while the piece is still in the core's cache: the checksum then costs a fraction of a read of
its own. numpy's copy and xxhash release the GIL (a `memoryview` slice assignment holds it for the
whole copy), so the prefill worker's engine loop keeps computing while a chunk is copied, and a
receiver in the same process checks one chunk while the next is copied."""

from __future__ import annotations

import socket
import threading
from collections import OrderedDict
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np
import xxhash

from .layout import TransferError
from .wire import send_msg

_PIECE = 512 << 10  # copied, then hashed while in the sender core's L2

_CREATED_HERE: set[str] = set()  # segments this process's receivers created


def _open(name: str) -> shared_memory.SharedMemory:
    try:
        segment = shared_memory.SharedMemory(name=name)
    except FileNotFoundError as e:
        raise TransferError(
            f"shared-memory segment {name!r} not found: the shm backend needs both workers on one host"
        ) from e
    # The receiver owns the segment: keep this process's tracker from unlinking it at exit
    # (unless the receiver is this process, whose tracker entry is the receiver's own).
    if name not in _CREATED_HERE:
        resource_tracker.unregister(segment._name, "shared_memory")  # type: ignore[attr-defined]
    return segment


class ShmSender:
    def __init__(self, sock: socket.socket, segment: shared_memory.SharedMemory, total_bytes: int):
        self.sock, self.segment = sock, segment
        if segment.size < total_bytes:
            raise TransferError(f"shared-memory segment {segment.name!r} holds {segment.size} bytes, not {total_bytes}")

    def put(self, offset: int, data: memoryview) -> None:
        digest = self.copy(offset, data)
        send_msg(self.sock, {"op": "chunk", "offset": offset, "nbytes": len(data), "checksum": digest})

    def copy(self, offset: int, data: memoryview) -> int:
        """Copies `data` into the segment at `offset`; returns the XXH3 of `data` (the source's
        bytes, so the receiver's check compares what landed with what was meant to)."""
        assert self.segment.buf is not None
        # The view exports the mapping: it must be gone before the mapping can close.
        target = np.frombuffer(self.segment.buf, np.uint8, len(data), offset)
        source = np.frombuffer(data, np.uint8)
        hasher = xxhash.xxh3_64()
        try:
            for start in range(0, len(data), _PIECE):
                np.copyto(target[start : start + _PIECE], source[start : start + _PIECE])
                hasher.update(data[start : start + _PIECE])
        finally:
            del target
        return hasher.intdigest()

    def close(self) -> None:
        pass  # the mapping stays open in the backend's cache


class ShmReceiver:
    def __init__(self, backend: ShmBackend, segment: shared_memory.SharedMemory):
        self.backend, self.segment = backend, segment

    def descriptor(self) -> dict[str, Any]:
        return {"backend": "shm", "name": self.segment.name}

    def take(self, offset: int, nbytes: int) -> memoryview:
        assert self.segment.buf is not None
        return self.segment.buf[offset : offset + nbytes]

    def close(self, reuse: bool = False) -> None:
        self.backend.give_back(self.segment, reuse)


class ShmBackend:
    """Keeps a few segments of finished transfers for the next ones (a fresh segment's pages fault
    in on first write, which costs more than the copy), and the senders' mappings of them. A
    segment whose transfer failed is unlinked, never reused: its sender may still be writing."""

    name = "shm"
    max_kept = 4

    def __init__(self) -> None:
        self._free: list[shared_memory.SharedMemory] = []
        self._mapped: OrderedDict[str, shared_memory.SharedMemory] = OrderedDict()
        self._lock = threading.Lock()

    def sender(self, sock: socket.socket, descriptor: dict[str, Any], total_bytes: int) -> ShmSender:
        if descriptor.get("backend") != "shm" or not isinstance(descriptor.get("name"), str):
            raise TransferError(
                f"the decode worker uses the {descriptor.get('backend')!r} backend, this prefill worker shm: "
                "give both the same --disaggregation-transfer-backend"
            )
        name = descriptor["name"]
        with self._lock:
            segment = self._mapped.pop(name, None) or _open(name)
            self._mapped[name] = segment
            while len(self._mapped) > 2 * self.max_kept:
                self._mapped.popitem(last=False)[1].close()
        return ShmSender(sock, segment, total_bytes)

    def receiver(self, sock: socket.socket, total_bytes: int) -> ShmReceiver:
        size = max(total_bytes, 1)
        with self._lock:
            fits = [s for s in self._free if s.size >= size]
            if fits:
                segment = min(fits, key=lambda s: s.size)
                self._free.remove(segment)
                return ShmReceiver(self, segment)
        segment = shared_memory.SharedMemory(create=True, size=-(-size // _ROUND) * _ROUND)
        _CREATED_HERE.add(segment.name)
        return ShmReceiver(self, segment)

    def give_back(self, segment: shared_memory.SharedMemory, reuse: bool) -> None:
        with self._lock:
            if reuse and len(self._free) < self.max_kept:
                self._free.append(segment)
                return
        _unlink(segment)

    def close(self) -> None:
        with self._lock:
            for segment in self._free:
                _unlink(segment)
            for segment in self._mapped.values():
                segment.close()
            self._free, self._mapped = [], OrderedDict()


_ROUND = 1 << 20


def _unlink(segment: shared_memory.SharedMemory) -> None:
    try:
        segment.close()
    except BufferError:  # a view of a chunk is still alive somewhere; unlink anyway
        pass
    segment.unlink()
    _CREATED_HERE.discard(segment.name)
