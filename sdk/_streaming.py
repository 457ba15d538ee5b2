"""Server-sent-event streams of chunks: `Stream` for `Client`, `AsyncStream` for `AsyncClient`.

Both iterate typed chunks, stop at ``data: [DONE]``, close the connection when iteration ends or
breaks, and keep the last `usage` seen (servers send it in the final chunk when the request sets
``stream_options.include_usage``), so ``stream.usage.cached_tokens`` works after the loop.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, Generic, TypeVar

import httpx

from ._exceptions import APIError, APIResponseValidationError
from ._types import Usage, _WithUsage

__all__ = ["Stream", "AsyncStream", "SSEDecoder"]

ChunkT = TypeVar("ChunkT", bound=_WithUsage)


class SSEDecoder:
    """Turns SSE lines into the JSON payloads of ``data:`` fields; `done` is set by ``[DONE]``."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self.done = False

    def feed(self, line: str) -> Any | None:
        """Consume one line; return a payload when `line` completes an event."""
        line = line.rstrip("\r")
        if line == "":
            return self._flush()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def _flush(self) -> Any | None:
        if not self._data:
            return None
        data, self._data = "\n".join(self._data), []
        if data.strip() == "[DONE]":
            self.done = True
            return None
        return json.loads(data)

    def finish(self) -> Any | None:
        """Payload of a last event not followed by a blank line."""
        return self._flush()


def _payloads(decoder: SSEDecoder, lines: Iterable[str]) -> Iterator[Any]:
    for line in lines:
        payload = decoder.feed(line)
        if payload is not None:
            yield payload
        if decoder.done:
            return


def _chunk(cast: type[ChunkT], payload: Any, response: httpx.Response) -> ChunkT:
    if isinstance(payload, dict) and "error" in payload:
        error = payload["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise APIError(f"The server reported an error mid-stream: {message}", request=response.request, body=payload)
    try:
        return cast.model_validate(payload)
    except ValueError as exc:
        raise APIResponseValidationError(response=response, body=payload) from exc


class Stream(Generic[ChunkT]):
    """An iterator of chunks over one HTTP response. Use it in a ``with`` block or iterate to the end."""

    def __init__(self, response: httpx.Response, cast: type[ChunkT]) -> None:
        self.response = response
        self._cast = cast
        self.usage: Usage | None = None

    def __iter__(self) -> Iterator[ChunkT]:
        decoder = SSEDecoder()
        try:
            for payload in _payloads(decoder, self.response.iter_lines()):
                yield self._track(_chunk(self._cast, payload, self.response))
            if not decoder.done and (tail := decoder.finish()) is not None:
                yield self._track(_chunk(self._cast, tail, self.response))
        finally:
            self.close()

    def _track(self, chunk: ChunkT) -> ChunkT:
        if chunk.usage is not None:
            self.usage = chunk.usage
        return chunk

    def close(self) -> None:
        """Close the connection; the server aborts the request if it is still generating."""
        self.response.close()

    def __enter__(self) -> Stream[ChunkT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncStream(Generic[ChunkT]):
    """The async twin of `Stream`: ``async for chunk in stream``."""

    def __init__(self, response: httpx.Response, cast: type[ChunkT]) -> None:
        self.response = response
        self._cast = cast
        self.usage: Usage | None = None

    async def __aiter__(self) -> AsyncIterator[ChunkT]:
        decoder = SSEDecoder()
        try:
            async for line in self.response.aiter_lines():
                payload = decoder.feed(line)
                if payload is not None:
                    yield self._track(_chunk(self._cast, payload, self.response))
                if decoder.done:
                    break
            if not decoder.done and (tail := decoder.finish()) is not None:
                yield self._track(_chunk(self._cast, tail, self.response))
        finally:
            await self.close()

    def _track(self, chunk: ChunkT) -> ChunkT:
        if chunk.usage is not None:
            self.usage = chunk.usage
        return chunk

    async def close(self) -> None:
        """Close the connection; the server aborts the request if it is still generating."""
        await self.response.aclose()

    async def __aenter__(self) -> AsyncStream[ChunkT]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
