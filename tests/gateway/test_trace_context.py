"""The gateway's spans join the caller's trace (W3C `traceparent`, `tracestate`, `baggage`), a
malformed header starts a new trace, and a front gateway passes its request span to a radixgate
worker: client span -> front span -> worker span, one trace id. In-process: the front's pool reaches
a worker app through an httpx ASGI transport, each app with its own in-memory span exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from in_thread_server import serve_in_thread
from opentelemetry import baggage, propagate
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.pool import WorkerPool
from radixgate.gateway.workers.worker import LocalWorker

COMPLETION = {"model": "tiny", "prompt": "trace context joins the caller", "max_tokens": 2}


@pytest.fixture
def caller() -> tuple[TracerProvider, InMemorySpanExporter]:
    """The application's own tracing: a provider of its own, as an app instrumented with the SDK has."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _headers_inside(provider: TracerProvider, **entries: str) -> tuple[dict[str, str], object]:
    """The headers an instrumented client sends from inside its span (and that span's context)."""
    span = provider.get_tracer("app").start_span("app.call_llm")
    ctx = set_span_in_context(span)
    for key, value in entries.items():
        ctx = baggage.set_baggage(key, value, ctx)
    headers: dict[str, str] = {}
    propagate.inject(headers, context=ctx)
    span.end()
    return headers, span.get_span_context()


def _request_spans(spans: InMemorySpanExporter, name: str) -> list:
    return [s for s in spans.get_finished_spans() if s.name == name]


def test_gateway_span_is_the_callers_child_on_chat_and_native(client: TestClient, spans, caller) -> None:
    provider, _ = caller
    headers, parent = _headers_inside(provider)
    headers["tracestate"] = "vendor=opaque"
    assert client.post("/v1/completions", json=COMPLETION, headers=headers).status_code == 200
    body = {"text": "trace context on generate", "sampling_params": {"max_new_tokens": 1}}
    assert client.post("/generate", json=body, headers=headers).status_code == 200
    for name in ("text_completion tiny", "generate tiny"):
        (span,) = _request_spans(spans, name)
        assert span.context.trace_id == parent.trace_id and span.parent.span_id == parent.span_id
        assert span.parent.is_remote and span.context.trace_state.get("vendor") == "opaque"
        phases = [s for s in spans.get_finished_spans() if s.parent and s.parent.span_id == span.context.span_id]
        assert phases and all(s.context.trace_id == parent.trace_id for s in phases)


@pytest.mark.parametrize(
    "traceparent",
    ["garbage", "00-00000000000000000000000000000000-0000000000000000-01", "00-abc-def-01", "ff-" + "a" * 48],
)
def test_malformed_traceparent_starts_a_new_trace(client: TestClient, spans, traceparent: str) -> None:
    r = client.post("/v1/completions", json=COMPLETION, headers={"traceparent": traceparent})
    assert r.status_code == 200, r.text
    (span,) = _request_spans(spans, "text_completion tiny")
    assert span.parent is None and span.context.trace_id != 0


@pytest.fixture
def front_and_worker(worker: LocalWorker) -> Iterator[tuple[TestClient, InMemorySpanExporter, InMemorySpanExporter]]:
    """A front gateway whose pool holds one RadixgateWorker, reaching a worker app on a loopback port;
    `front.sent` is each request the worker received: (path, its headers)."""
    worker_spans, front_spans = InMemorySpanExporter(), InMemorySpanExporter()
    worker_app = create_app(GatewayConfig(), worker=worker, span_exporter=worker_spans)
    sent: list[tuple[str, dict[str, str]]] = []

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            sent.append((scope["path"], {k.decode(): v.decode() for k, v in scope["headers"]}))
        await worker_app(scope, receive, send)

    pool = WorkerPool(worker.tokenizer, "tiny")
    with serve_in_thread(recording, "worker") as url:
        pool.add_remote(url)
        with TestClient(create_app(GatewayConfig(), worker=pool, span_exporter=front_spans)) as front:
            front.sent = sent  # type: ignore[attr-defined]
            yield front, front_spans, worker_spans


def test_one_trace_from_client_through_front_to_worker(front_and_worker, caller) -> None:
    front, front_spans, worker_spans = front_and_worker
    provider, _ = caller
    headers, parent = _headers_inside(provider, user="u-17")
    for stream in (False, True):
        r = front.post("/v1/completions", json={**COMPLETION, "stream": stream}, headers=headers)
        assert r.status_code == 200, r.text
    front_requests = _request_spans(front_spans, "text_completion tiny")
    worker_requests = _request_spans(worker_spans, "generate tiny")
    assert len(front_requests) == len(worker_requests) == 2
    for front_span, worker_span in zip(front_requests, worker_requests, strict=True):
        assert front_span.parent.span_id == parent.span_id
        assert worker_span.parent.span_id == front_span.context.span_id  # the worker's span is the front's child
        assert {front_span.context.trace_id, worker_span.context.trace_id} == {parent.trace_id}
    generates = [headers for path, headers in front.sent if path == "/generate"]
    assert len(generates) == 2 and all("u-17" in headers["baggage"] for headers in generates)


def test_probes_without_a_request_carry_no_trace(front_and_worker) -> None:
    front, _, _ = front_and_worker
    assert front.post("/v1/completions", json=COMPLETION).status_code == 200
    probes = [headers for path, headers in front.sent if path != "/generate"]
    assert probes and all("traceparent" not in headers for headers in probes)
    (generate,) = [headers for path, headers in front.sent if path == "/generate"]
    assert generate["traceparent"].startswith("00-")  # the front's own new trace
