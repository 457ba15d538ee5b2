"""The front's lean HTTP/1.1 client for a worker's streams (`gateway/workers/worker_http.py`),
against a worker scripted byte by byte: an asyncio TCP server on 127.0.0.1 and a free port whose
answers the test writes itself, split where it chooses, cut, stalled or refused."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import httpx
import pytest

from radixgate.engine.protocol import GenerateRequest, SamplingParams
from radixgate.gateway.workers.failures import WorkerError, WorkerUnavailable, is_down
from radixgate.gateway.workers.failures import broke as _broke
from radixgate.gateway.workers.remote import RadixgateWorker
from radixgate.gateway.workers.worker_http import WorkerConnections, sse_events

# Answers: called with the request's index on the worker and its connection's streams.
Answer = Callable[[int, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Runner = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]


def sse_response(events: list[dict[str, Any]], chunk_size: int = 7, extra_headers: str = "") -> bytes:
    """A chunked SSE answer whose chunks (`chunk_size` bytes, uppercase hex sizes, an extension on
    the first) cut through events, line ends and the `[DONE]` line alike."""
    body = b"".join(b"data: " + json.dumps(event).encode() + b"\r\n\r\n" for event in events) + b"data: [DONE]\n\n"
    chunks = [body[i : i + chunk_size] for i in range(0, len(body), chunk_size)]
    framed = b"".join(b"%X%s\r\n%s\r\n" % (len(c), b";x=1" if i == 0 else b"", c) for i, c in enumerate(chunks))
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{extra_headers}Transfer-Encoding: chunked\r\n\r\n"
    return head.encode() + framed + b"0\r\n\r\n"


def sized_response(status: int, body: bytes) -> bytes:
    return f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


EVENTS = [{"n": 1, "text": "a\nb"}, {"n": 2, "text": "ü" * 5}, {"n": 3, "text": ""}]
ANSWER = sse_response(EVENTS)


class ScriptedWorker:
    """Reads each request on each connection in full, then lets `answer` write the reply."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.num_connections = 0
        self.requests: list[bytes] = []
        self.num_closed_by_client = 0  # connections that reached EOF while the worker read them
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.num_connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.num_closed_by_client += 1
                    return
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                self.requests.append(head + await reader.readexactly(length))
                await self.answer(len(self.requests) - 1, reader, writer)
                if writer.is_closing():
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            self.num_closed_by_client += 1
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ScriptedWorker]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            yield self
        finally:
            server.close()
            await server.wait_closed()


LOOPS = ["asyncio", "uvloop"]  # uvicorn, so `radixgate serve`, runs on uvloop wherever it is installed


@pytest.fixture(params=LOOPS)
def run(request: pytest.FixtureRequest) -> Runner:
    """Runs a test's coroutine (10 s at most) on a fresh event loop of each kind."""
    factory = None
    if request.param == "uvloop":
        factory = pytest.importorskip("uvloop").new_event_loop

    def run_on_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(asyncio.wait_for(test(), 10))

    return run_on_loop


async def read_events(pool: WorkerConnections) -> list[dict[str, Any]]:
    response = await pool.open("/generate", {"input_ids": [1, 2]}, {"X-Trace": "t"})
    try:
        events = [event async for event in sse_events(response.aiter_lines())]
        await response.read_to_end(1.0)  # as `remote.py` does: the end may come after `[DONE]`
        return events
    finally:
        response.close()


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


def test_a_stream_split_at_every_byte_reads_the_same_on_one_kept_connection(run: Runner) -> None:
    """Each answer is written in two pieces, cut at every position in turn (inside the status line,
    a header, a chunk-size line, a CRLF, an event, a UTF-8 character, between events, the end),
    then one a byte at a time."""

    async def split(index: int, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cuts = [1 + index] if index < len(ANSWER) - 1 else range(1, len(ANSWER))
        for start, end in zip([0, *cuts], [*cuts, len(ANSWER)], strict=True):
            writer.write(ANSWER[start:end])
            await writer.drain()
            await asyncio.sleep(0.001 if len(cuts) == 1 else 0)  # the client reads the first piece alone

    async def test() -> None:
        async with ScriptedWorker(split).running() as worker:
            pool = WorkerConnections(worker.url)
            for _ in range(len(ANSWER)):
                assert await read_events(pool) == EVENTS
            pool.close()
        assert pool.num_connects == 1 and worker.num_connections == 1
        first = worker.requests[0]
        assert first.startswith(b"POST /generate HTTP/1.1\r\n") and b"\r\nX-Trace: t\r\n" in first
        assert first.endswith(b'\r\n\r\n{"input_ids":[1,2]}')

    run(test)


def test_a_worker_that_closes_after_answering_gets_a_new_connection(run: Runner) -> None:
    """`Connection: close`, and a body ended by the connection's end: read whole, never kept."""
    eof_body = b'{"data": [1, 2, 3]}'

    async def answer(index: int, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if index % 2 == 0:
            writer.write(sse_response(EVENTS, extra_headers="Connection: close\r\n"))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + eof_body)
        await writer.drain()
        writer.close()

    async def test() -> None:
        async with ScriptedWorker(answer).running() as worker:
            pool = WorkerConnections(worker.url)
            assert await read_events(pool) == EVENTS
            response = await pool.open("/v1/embeddings", {}, {})
            assert await response.read() == eof_body
            response.close()
            assert await read_events(pool) == EVENTS
            assert pool.num_idle == 0 and pool.num_connects == worker.num_connections == 3

    run(test)


def test_a_worker_that_breaks_mid_stream_fails_the_stream_as_taken_and_broken(run: Runner) -> None:
    """After the first event the worker goes away: the reader gets httpx's RemoteProtocolError at
    once (never a hang); through `RadixgateWorker` it is the RuntimeError the pool and the PD
    router read as "the worker broke" (`_broke`), not as "the worker is down" (`is_down`)."""
    event = {"output_ids": [5], "text": "x", "meta_info": {"finish_reason": None}}
    answer = sse_response([event, event], chunk_size=1000)  # one chunk

    async def cut(_: int, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(answer[: answer.rindex(b"data: {") + 10])  # inside the chunk and the second event
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.close()

    async def test() -> None:
        async with ScriptedWorker(cut).running() as worker:
            pool = WorkerConnections(worker.url)
            response = await pool.open("/generate", {}, {})
            with pytest.raises(httpx.RemoteProtocolError):
                _ = [line async for line in response.aiter_lines()]
            response.close()
            assert pool.num_idle == 0

            remote = RadixgateWorker(worker.url)
            request = GenerateRequest("r", [1, 2], SamplingParams(max_new_tokens=2))
            deltas = []
            with pytest.raises(RuntimeError, match="failed mid-stream") as failed:
                async for delta in remote.stream(request):
                    deltas.append(delta)
            await remote.aclose()
            assert [d.token_ids for d in deltas] == [[5]]
            assert _broke(failed.value) and not is_down(failed.value)

    run(test)


def test_a_refused_request_is_unavailable_and_one_dropped_unanswered_was_taken(run: Runner) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once the socket closes

    async def hang_up(_: int, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def test() -> None:
        with pytest.raises(WorkerUnavailable) as refused:
            await WorkerConnections(f"http://127.0.0.1:{port}").open("/generate", {}, {})
        assert isinstance(refused.value.__cause__, httpx.ConnectError) and is_down(refused.value)
        async with ScriptedWorker(hang_up).running() as worker:
            with pytest.raises(WorkerError) as dropped:
                await WorkerConnections(worker.url).open("/generate", {}, {})
        assert isinstance(dropped.value.__cause__, httpx.RemoteProtocolError)
        assert _broke(dropped.value) and not is_down(dropped.value)

    run(test)


def test_a_connection_not_accepted_in_time_is_a_connect_timeout(run: Runner) -> None:
    """A listener whose backlog is full drops the SYN: the connect hangs until its timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(4):  # fill the accept queue (Linux keeps backlog + 1)
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)

        async def test() -> None:
            pool = WorkerConnections(f"http://127.0.0.1:{port}", connect_timeout_s=0.2)
            with pytest.raises(WorkerUnavailable) as failed:
                await pool.open("/generate", {}, {})
            assert isinstance(failed.value.__cause__, httpx.ConnectTimeout) and is_down(failed.value)

        try:
            run(test)
        finally:
            for filler in fillers:
                filler.close()


def stalling(after: bytes) -> Answer:
    async def stall(_: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(after)
        await writer.drain()
        await reader.read()  # until the client closes the connection

    return stall


@pytest.mark.parametrize("stalls", ["before_the_status", "mid_stream"])
def test_a_cancelled_reader_closes_its_connection_and_frees_its_slot(run: Runner, stalls: str) -> None:
    """A worker that stalls is read until the reader's task is cancelled (the client went away):
    the connection is closed, so the worker sees its end, and never kept; its slot is free again."""
    sent = b"" if stalls == "before_the_status" else ANSWER[: ANSWER.index(b"data:") + 20]

    async def test() -> None:
        async with ScriptedWorker(stalling(sent)).running() as worker:
            pool = WorkerConnections(worker.url, max_connections=1)

            async def read() -> None:
                response = await pool.open("/generate", {}, {})
                try:
                    async for _ in response.aiter_bytes():
                        pass
                finally:
                    response.close()

            reader = asyncio.create_task(read())
            await until(lambda: len(worker.requests) == 1)
            await asyncio.sleep(0.02)
            reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader
            assert pool.num_idle == 0
            await until(lambda: worker.num_closed_by_client == 1)
            worker.answer = answer_with(ANSWER)
            assert await read_events(pool) == EVENTS  # the one slot was handed back
            assert pool.num_connects == 2

    run(test)


def answer_with(*answers: bytes) -> Answer:
    async def write(index: int, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(answers[index % len(answers)])

    return write


def test_a_response_that_ended_unread_is_kept_without_its_leftovers(run: Runner) -> None:
    """The reader stopped after the first event while the rest arrived: the connection is kept,
    and the next response on it reads only its own bytes."""
    first, second = sse_response([{"n": 1}, {"n": 2}], chunk_size=1000), sse_response([{"n": 3}])
    first_event_ends = first.index(b"\r\n\r\n", first.index(b"data:")) + 4

    async def answer(index: int, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if index == 0:
            writer.write(first[:first_event_ends])
            await writer.drain()
            await asyncio.sleep(0.02)  # the client reads the first event alone
            writer.write(first[first_event_ends:])
        else:
            writer.write(second)

    async def test() -> None:
        async with ScriptedWorker(answer).running() as worker:
            pool = WorkerConnections(worker.url)
            response = await pool.open("/generate", {}, {})
            lines = response.aiter_lines()
            assert await anext(lines) == b'data: {"n": 1}'
            await asyncio.sleep(0.05)  # the rest arrives; nobody reads it
            response.close()
            response.close()  # a second close hands back nothing
            assert pool.num_idle == 1
            assert await read_events(pool) == [{"n": 3}]
            assert pool.num_connects == 1

    run(test)


def test_idle_connections_expire_and_one_the_worker_closed_is_never_used(run: Runner) -> None:
    async def answer(index: int, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(ANSWER)
        await writer.drain()
        if index == 1:
            writer.close()  # as a worker's keep-alive timeout does, after the response

    async def test() -> None:
        async with ScriptedWorker(answer).running() as worker:
            pool = WorkerConnections(worker.url, keepalive_expiry_s=0.05)
            assert await read_events(pool) == EVENTS
            await asyncio.sleep(0.1)  # past the expiry: dropped, not reused
            assert await read_events(pool) == EVENTS
            await until(lambda: worker.num_closed_by_client == 1)
            await asyncio.sleep(0.02)  # the worker's close reaches the idle connection
            assert await read_events(pool) == EVENTS
            assert pool.num_connects == worker.num_connections == 3

    run(test)


def test_error_statuses_raise_their_failure_kinds_and_keep_the_connection(run: Runner) -> None:
    error = json.dumps({"error": {"message": "draining", "code": "busy"}}).encode()
    answers = [sized_response(503, error), sized_response(500, b"boom"), sized_response(400, error)]

    async def test() -> None:
        async with ScriptedWorker(answer_with(*answers)).running() as worker:
            pool = WorkerConnections(worker.url)
            with pytest.raises(WorkerUnavailable, match="answered 503: draining") as unavailable:
                await pool.open("/generate", {}, {})
            assert unavailable.value.code == "busy" and not is_down(unavailable.value)
            with pytest.raises(WorkerError, match="answered 500: boom"):
                await pool.open("/generate", {}, {})
            with pytest.raises(ValueError, match="^draining$"):
                await pool.open("/generate", {}, {})
            assert pool.num_connects == 1 and pool.num_idle == 1

    run(test)


def test_a_large_body_and_an_interim_response_read_whole(run: Runner) -> None:
    """A body past the read pause (the socket stops and resumes as it is taken), and a 1xx answer
    before the real one (its headers are not the response's)."""
    large = bytes(range(256)) * (3 << 12)  # 3 MiB
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + sized_response(200, b"[1]")

    async def test() -> None:
        async with ScriptedWorker(answer_with(sized_response(200, large), interim)).running() as worker:
            pool = WorkerConnections(worker.url)
            for expected in (large, b"[1]"):
                response = await pool.open("/v1/embeddings", {}, {})
                await asyncio.sleep(0.05)  # more than the pause arrives unread: the socket stops
                assert response.status == 200 and await response.read() == expected
                response.close()
            assert pool.num_connects == 1

    run(test)


def test_events_python_json_writes_that_msgspec_cannot_read_still_decode(run: Runner) -> None:
    async def lines() -> AsyncIterator[bytes]:
        for line in (b'data: {"logprob": -Infinity}', b"", b"data: [DONE]", b'data: {"late": 1}'):
            yield line

    async def test() -> None:
        assert [event async for event in sse_events(lines())] == [{"logprob": float("-inf")}]

    run(test)
