"""The front's HTTP/1.1 client for a worker's hot requests (`/generate`, `/v1/completions`,
`/v1/embeddings`): kept-alive connections per worker, responses parsed by httptools (llhttp).

httpx (with h11 under it) spent most of the front's event loop on each streamed request; this
client does the one thing those requests need: POST a JSON body, read the status, then the body
(chunked or sized) as it arrives, split into SSE lines. Health checks and admin calls stay on httpx.

Failures are raised as httpx's exception types, so the callers that classify them (`remote.py`,
the PD router's `_broke`) read them as they read httpx's own:
- `httpx.ConnectError` / `httpx.ConnectTimeout`: the connection could not be made (never sent);
- `httpx.ReadError` / `httpx.RemoteProtocolError`: it broke, or the worker closed it, once the
  request was sent: the worker may have taken it.
As with the httpx client before it, only connecting has a timeout: a stream may take as long as
its generation does, and ends early only when its caller stops reading (the client went away).

A connection goes back to its worker's pool only once its response arrived to the end; a
response closed before that (the client went away, an error) closes its connection, which is how
the worker learns to abort the request.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import httptools
import httpx
import msgspec

from .failures import WorkerError, WorkerUnavailable, error_of, status_failure

CONNECT_TIMEOUT_S = 2.0
KEEPALIVE_EXPIRY_S = 1.0  # idle connections dropped before a worker drops them (uvicorn: 5 s): none races a close
MAX_CONNECTIONS = 256  # in flight to one worker; a request past it waits for one to free
MAX_IDLE_CONNECTIONS = 256
PAUSE_BYTES = 1 << 20  # unread body bytes past which the socket stops being read


async def sse_events(lines: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of an SSE body up to `[DONE]`; an error event raises `WorkerError`."""
    async for line in lines:
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        try:
            event = msgspec.json.decode(data)
        except msgspec.DecodeError:  # Python's json writes NaN and -Infinity (a logprob), msgspec reads neither
            event = json.loads(data)
        if "error" in event:
            raise WorkerError(*error_of(event))
        yield event


class _Connection(asyncio.Protocol):
    """One TCP connection and the response being read on it (one request at a time)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.body: deque[bytes] = deque()
        self.num_buffered = 0
        self.status = 0  # set once the final (non-1xx) status line and headers arrived
        self.is_active = False  # a request was sent and its response not released
        self.is_complete = False  # the response's last byte arrived
        self.is_framed = False  # Content-Length or chunked: the body does not end at EOF
        self.keeps_alive = False  # the response allows another request (llhttp forgets once it ended)
        self.error: Exception | None = None
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None

    # ---- asyncio's callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one without the asyncio base class

    def data_received(self, data: bytes) -> None:
        if not self.is_active:  # nothing was asked: a kept connection must stay silent
            self._fail(httpx.RemoteProtocolError("the worker sent data on an idle connection"))
            return
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(httpx.RemoteProtocolError(f"the worker's response is not HTTP/1.1: {exc!r}"))
            return
        if self.num_buffered > PAUSE_BYTES and self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        if self.is_active and self.status and not self.is_framed:
            self.is_complete = True  # a body delimited by the connection's end
        self._fail(httpx.RemoteProtocolError("the worker closed the connection before its response ended"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(httpx.ReadError(f"the connection to the worker broke: {exc}" if exc else "connection closed"))

    # ---- httptools' callbacks (a 1xx interim response has headers and an end, never a body)
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
            self.is_framed = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status >= 200:
            self.status = status
        else:
            self.is_framed = False

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.num_buffered += len(body)

    def on_message_complete(self) -> None:
        if self.status:
            self.is_complete = True
            self.keeps_alive = self.parser.should_keep_alive()

    # ---- the reader's side
    def _fail(self, exc: Exception) -> None:
        if self.error is None:
            self.error = exc
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        """Until more of the response arrived, it ended, or the connection failed."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def take(self) -> bytes | None:
        """The body bytes arrived so far (None when none did)."""
        if not self.body:
            return None
        data = self.body.popleft() if len(self.body) == 1 else b"".join(self.body)
        self.body.clear()
        if self.num_buffered > PAUSE_BYTES and self.transport is not None:
            self.transport.resume_reading()
        self.num_buffered = 0
        return data

    @property
    def is_reusable(self) -> bool:
        return (
            self.is_complete
            and self.keeps_alive
            and self.error is None
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def start(self, request: bytes) -> None:
        assert self.transport is not None and not self.is_active
        self.is_active, self.is_complete, self.is_framed, self.keeps_alive, self.status = True, False, False, False, 0
        self.body.clear()  # what the last reader left unread of a response that had ended
        self.num_buffered = 0
        if not self.transport.is_reading():
            self.transport.resume_reading()
        self.transport.write(request)

    def abort(self) -> None:
        self.error = self.error or httpx.ReadError("closed by the front")
        if self.transport is not None:
            self.transport.abort()


class WorkerResponse:
    """A response's status and its body as it arrives; `close()` (always) hands the connection back."""

    def __init__(self, pool: WorkerConnections, connection: _Connection) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
        self.status = connection.status

    def _connected(self) -> _Connection:
        if self._connection is None:
            raise httpx.StreamClosed()
        return self._connection

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        connection = self._connected()
        while True:
            data = connection.take()
            if data is not None:
                yield data
            elif connection.is_complete:
                return
            elif connection.error is not None:
                raise connection.error
            else:
                await connection.wait()

    async def aiter_lines(self) -> AsyncIterator[bytes]:
        """The body's lines without their line ends (SSE: `data: ...`, then a blank line)."""
        rest = b""
        async for data in self.aiter_bytes():
            lines = (rest + data).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield line[:-1] if line.endswith(b"\r") else line
        if rest:
            yield rest

    async def read(self) -> bytes:
        return b"".join([data async for data in self.aiter_bytes()])

    async def read_to_end(self, timeout_s: float) -> None:
        """Reads what is left (an SSE stream's `[DONE]` and end), so the connection can be kept;
        one not ended within `timeout_s`, or failing, is closed by `close()` instead."""
        connection = self._connected()
        connection.take()
        if connection.is_complete or connection.error is not None:
            return  # nearly always: the end came with the last event
        try:
            async with asyncio.timeout(timeout_s):
                async for _ in self.aiter_bytes():
                    pass
        except (TimeoutError, httpx.TransportError):
            pass

    def close(self) -> None:
        """Hands the connection back: kept when its response ended, else closed. Safe to repeat."""
        if self._connection is not None:
            self._pool.release(self._connection)
            self._connection = None


class WorkerConnections:
    """The kept-alive connections to one worker (`http://` or `https://` base URL)."""

    def __init__(
        self,
        base_url: str,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        keepalive_expiry_s: float = KEEPALIVE_EXPIRY_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        url = urlsplit(base_url)
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.path_prefix = url.path.rstrip("/")
        self._ssl: ssl.SSLContext | None = httpx.create_ssl_context() if url.scheme == "https" else None
        self._host_header = url.netloc.rpartition("@")[2]
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_expiry_s = keepalive_expiry_s
        self._idle: list[_Connection] = []  # most recently used last
        self._slots = asyncio.Semaphore(max_connections)
        self._is_closed = False
        self.num_connects = 0

    @property
    def num_idle(self) -> int:
        return len(self._idle)

    async def open(self, path: str, body: dict[str, Any], headers: Mapping[str, str]) -> WorkerResponse:
        """POSTs `body` as JSON and checks the answer's status, raising the failure kinds of
        `failures.py` before any of the body is read. The caller must `close()` the response."""
        where = self.base_url
        try:
            response = await self.post(path, msgspec.json.encode(body), headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # never sent
            raise WorkerUnavailable(f"{where}: {type(exc).__name__}: {exc}") from exc
        except httpx.TransportError as exc:  # sent, then the connection failed: the worker may have taken it
            raise WorkerError(f"{where}: {type(exc).__name__}: {exc}") from exc
        if response.status < 400:
            return response
        try:
            text = (await response.read()).decode(errors="replace")
        except httpx.TransportError as exc:
            text = f"(its body was cut: {exc})"
        finally:
            response.close()
        raise status_failure(where, response.status, text)

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> WorkerResponse:
        """Sends the request and waits for its status line and headers. The caller must `close()`
        the response, also when it stops reading early."""
        request = self._request_bytes(path, body, headers)
        await self._slots.acquire()
        connection = None
        try:
            connection = self._idle_connection() or await self._connect()
            connection.start(request)
            while not connection.status:
                if connection.error is not None:
                    raise connection.error
                await connection.wait()
        except BaseException:  # cancelled too: a request the worker may have taken is closed, never kept
            if connection is not None:
                connection.abort()
            self._slots.release()
            raise
        return WorkerResponse(self, connection)

    def release(self, connection: _Connection) -> None:
        """Keeps a connection whose response arrived to the end; closes any other."""
        if not connection.is_active:
            return  # released already
        connection.is_active = False
        self._slots.release()
        if connection.is_reusable and len(self._idle) < MAX_IDLE_CONNECTIONS and not self._is_closed:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.abort()

    def close(self) -> None:
        """Closes the idle connections; those in flight close as their responses are released."""
        self._is_closed = True
        while self._idle:
            self._idle.pop().abort()

    def _idle_connection(self) -> _Connection | None:
        expired_before = time.monotonic() - self.keepalive_expiry_s
        while self._idle and self._idle[0].idle_since < expired_before:  # the oldest first
            self._idle.pop(0).abort()
        while self._idle:
            connection = self._idle.pop()
            if connection.error is None and connection.transport is not None and not connection.transport.is_closing():
                return connection
            connection.abort()  # the worker closed it while it was idle
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, connection = await loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(
                f"no connection to {self.host}:{self.port} within {self.connect_timeout_s} s"
            ) from exc
        except OSError as exc:
            raise httpx.ConnectError(f"{self.host}:{self.port}: {exc}") from exc
        self.num_connects += 1
        return connection

    def _request_bytes(self, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        lines = [
            f"POST {self.path_prefix}{path} HTTP/1.1",
            f"Host: {self._host_header}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        ]
        for name, value in headers.items():
            if "\r" in name or "\n" in name or ":" in name or "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r}: a line break or colon cannot go in an HTTP header")
            lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
