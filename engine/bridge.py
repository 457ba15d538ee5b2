"""The bridge between callers' threads (and asyncio loops) and the engine loop's own thread.

Other threads never touch scheduler or cache state: they post typed messages to the `Inbox`, and
the loop thread handles them between steps. Results travel back through a `Future` (calls) or
through a request's `on_update` callback, which `asyncio_listener` forwards into an asyncio queue.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from .scheduler.request import Req, StreamDelta


@dataclass(frozen=True)
class AddRequest:
    req: Req


@dataclass(frozen=True)
class AbortRequest:
    rid: str


@dataclass(frozen=True)
class CallInLoop:
    """Runs `fn` on the loop thread between steps; its result or exception lands in `future`."""

    fn: Callable[[], Any]
    future: Future[Any]


@dataclass(frozen=True)
class Wake:
    """Wakes an idle loop (for example to notice that it is stopping)."""


Message = AddRequest | AbortRequest | CallInLoop | Wake


class Inbox:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Message] = queue.SimpleQueue()

    def put(self, message: Message) -> None:
        self._queue.put(message)

    def drain(self, timeout: float | None) -> Iterator[Message]:
        """Yields every queued message; waits up to `timeout` for the first (None: wait forever,
        0: do not wait)."""
        try:
            message = self._queue.get(timeout=timeout) if timeout != 0 else self._queue.get_nowait()
            while True:
                yield message
                message = self._queue.get_nowait()
        except queue.Empty:
            return


class LoopThread:
    """The background thread that runs the engine loop, and calls made into it from outside."""

    def __init__(self, name: str, loop: Callable[[], None], inbox: Inbox):
        self._name = name
        self._loop = loop
        self._inbox = inbox
        self._thread: threading.Thread | None = None

    @property
    def is_started(self) -> bool:
        return self._thread is not None

    def is_current(self) -> bool:
        """True on the loop thread itself, and when no thread runs (the caller drives the loop)."""
        return self._thread is None or threading.current_thread() is self._thread

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def call(self, fn: Callable[[], Any], timeout: float = 60.0) -> Any:
        """Runs `fn` where the engine state lives: here if this is the loop thread, else in the loop."""
        if self.is_current():
            return fn()
        future: Future[Any] = Future()
        self._inbox.put(CallInLoop(fn, future))
        return future.result(timeout=timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._inbox.put(Wake())
            self._thread.join(timeout=timeout)
            self._thread = None


def asyncio_listener(deltas: asyncio.Queue[StreamDelta]) -> Callable[[Req, StreamDelta], None]:
    """An `on_update` callback, called on the loop thread, that hands deltas to the running asyncio loop."""
    loop = asyncio.get_running_loop()

    def listener(req: Req, delta: StreamDelta) -> None:
        loop.call_soon_threadsafe(deltas.put_nowait, delta)

    return listener
