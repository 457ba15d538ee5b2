"""One span per request with GenAI attributes, and queue / prefill / decode children; OTLP export
over gRPC and HTTP to a collector in this process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient


def test_request_span_has_genai_attributes_and_phases(client: TestClient, spans, long_prefix) -> None:
    body = {
        "model": "tiny",
        "max_tokens": 3,
        "messages": [{"role": "user", "content": long_prefix("trace")}],
        "metadata": {"prompt_template": "traced"},
    }
    client.post("/v1/chat/completions", json=body)
    client.post("/v1/chat/completions", json=body)
    finished = spans.get_finished_spans()
    requests = [s for s in finished if s.name == "chat tiny"]
    assert len(requests) == 2
    attrs = requests[1].attributes
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "tiny"
    assert attrs["gen_ai.usage.output_tokens"] == 3
    assert attrs["gen_ai.usage.input_tokens"] > 0
    assert attrs["gen_ai.usage.cache_read.input_tokens"] > 0
    assert attrs["radixgate.prompt_template"] == "traced"
    children = {s.name for s in finished if s.parent is not None and s.parent.span_id == requests[1].context.span_id}
    assert children == {"radixgate.queue", "radixgate.prefill", "radixgate.decode"}
    assert all(
        s.context.trace_id == requests[1].context.trace_id
        for s in finished
        if s.parent is not None and s.parent.span_id == requests[1].context.span_id
    )


def test_prompt_text_never_reaches_spans(client: TestClient, spans) -> None:
    secret = "the-secret-prompt-text"
    client.post("/v1/completions", json={"model": "tiny", "prompt": secret, "max_tokens": 1})
    for span in spans.get_finished_spans():
        assert all(secret not in str(v) for v in span.attributes.values())


def test_prompt_text_is_logged_only_when_asked(make_client, caplog) -> None:
    secret = "another-secret-prompt"
    with caplog.at_level("INFO", logger="radixgate.gateway.requests"):
        make_client().post("/v1/completions", json={"model": "tiny", "prompt": secret, "max_tokens": 1})
        assert secret not in caplog.text
        body = {"model": "tiny", "prompt": secret, "max_tokens": 1}
        make_client(log_requests=True).post("/v1/completions", json=body)
        assert secret in caplog.text


def test_exporters_follow_otel_env(monkeypatch, capsys) -> None:
    from radixgate.gateway.observe.telemetry import make_tracer

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    tracer, provider = make_tracer()
    tracer.start_span("console-span").end()
    provider.force_flush()
    assert "console-span" in capsys.readouterr().out
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    tracer, provider = make_tracer()
    assert provider is None


class _Collector:
    """An OTLP trace collector in this process: gRPC (grpcio + opentelemetry-proto) or HTTP."""

    def __init__(self) -> None:
        self.requests: list = []
        self.received = threading.Event()

    def take(self, request) -> None:
        self.requests.append(request)
        self.received.set()

    def span_names(self) -> set[str]:
        return {
            span.name
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        }


@contextmanager
def _grpc_collector() -> Iterator[tuple[_Collector, str]]:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    collector = _Collector()

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: N802 (the gRPC method's name)
            collector.take(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield collector, f"http://127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


@contextmanager
def _http_collector() -> Iterator[tuple[_Collector, str]]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    collector = _Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf":
                collector.take(ExportTraceServiceRequest.FromString(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield collector, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.parametrize(
    "protocol_env, protocol, collector",
    [
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc", _grpc_collector),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", _grpc_collector),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", _http_collector),
    ],
)
def test_otlp_export_reaches_a_collector(monkeypatch, protocol_env: str, protocol: str, collector) -> None:
    from radixgate.gateway.observe.telemetry import make_tracer

    with collector() as (received, endpoint):
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
        monkeypatch.setenv(protocol_env, protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        tracer, provider = make_tracer()
        tracer.start_span(f"exported over {protocol}").end()
        assert provider.force_flush(timeout_millis=20_000)
        assert received.received.wait(timeout=20)
        provider.shutdown()
    assert received.span_names() == {f"exported over {protocol}"}


def test_unknown_otlp_protocol_is_a_warning_not_an_error(monkeypatch, caplog) -> None:
    from radixgate.gateway.observe.telemetry import make_tracer

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with caplog.at_level("WARNING", logger="radixgate.gateway"):
        tracer, provider = make_tracer()
    assert "'http/json' is not supported" in caplog.text
    tracer.start_span("kept locally").end()
    provider.shutdown()
