"""OpenTelemetry traces: one span per request with GenAI semantic-convention attributes,
and child spans for queueing, prefill and decode built from the engine's timestamps.

The request span joins the caller's trace: `TraceContextMiddleware` reads W3C `traceparent`,
`tracestate` and `baggage` (the propagators `OTEL_PROPAGATORS` names, those by default) on every
route, so the span is the caller's child; a malformed `traceparent` is ignored (a new trace).
While a worker streams, the request span is current, and `trace_headers` puts it in the headers a
remote worker is sent, so a front and its workers record one trace.

Exporters come from the standard environment variables (read here and nowhere else):
`OTEL_SDK_DISABLED=true` turns tracing off; `OTEL_TRACES_EXPORTER` is a comma list of
`console`, `otlp` or `none` (the default here, since no collector is assumed); `otlp` speaks
`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (else `OTEL_EXPORTER_OTLP_PROTOCOL`): `http/protobuf` (the
default) or `grpc`, to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`, which
the exporters read themselves with the other `OTEL_EXPORTER_OTLP_*` settings (headers, timeout,
TLS). `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the service. Tests pass their own
exporter, e.g. `InMemorySpanExporter`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import aclosing
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context

logger = logging.getLogger("radixgate.gateway")
T = TypeVar("T")
OTLP_PROTOCOLS = ("http/protobuf", "grpc")
ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class TraceContextMiddleware:
    """Makes the caller's trace context (W3C `traceparent`, `tracestate`, `baggage`) the current
    one while a request runs, on every route; headers that do not parse leave a new trace."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope.get("headers", ())}
        token = otel_context.attach(propagate.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            otel_context.detach(token)


def trace_headers(headers: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """`headers` with the current trace context added (`traceparent`, ...): what a remote worker is sent."""
    propagate.inject(headers)
    return headers


async def with_current_span(span: Span, stream: AsyncIterator[T]) -> AsyncGenerator[T, None]:
    """Iterate `stream` with `span` current (attached and detached around each step, in the task
    that iterates), so what the worker sends or starts is the span's child."""
    span_context = set_span_in_context(span)
    async with aclosing(stream) as items:  # type: ignore[type-var]
        iterator = aiter(items)
        while True:
            token = otel_context.attach(span_context)
            try:
                item = await anext(iterator)
            except StopAsyncIteration:
                return
            finally:
                otel_context.detach(token)
            yield item


def _otlp_exporter() -> SpanExporter | None:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    protocol = (protocol or "http/protobuf").strip().lower()
    if protocol not in OTLP_PROTOCOLS:
        logger.warning("OTLP protocol %r is not supported (use grpc or http/protobuf); no traces exported", protocol)
        return None
    package = "grpc" if protocol == "grpc" else "http"
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GRPCExporter

            return GRPCExporter()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter

        return HTTPExporter()
    except ImportError:
        logger.warning(
            "OTEL_TRACES_EXPORTER=otlp over %s needs opentelemetry-exporter-otlp-proto-%s "
            "(pip install 'radixgate[serve]'); no traces are exported",
            protocol,
            package,
        )
        return None


def _exporters_from_env() -> list[SpanExporter]:
    names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "console":
            exporters.append(ConsoleSpanExporter(out=sys.stdout))
        elif name == "otlp":
            exporter = _otlp_exporter()
            if exporter is not None:
                exporters.append(exporter)
        elif name != "none":
            logger.warning("OTEL_TRACES_EXPORTER: unknown exporter %r ignored (use console, otlp or none)", name)
    return exporters


def make_tracer(exporter: SpanExporter | None = None) -> tuple[Tracer, TracerProvider | None]:
    """A tracer of our own provider (never the global one, so many apps can coexist in tests)."""
    if exporter is None and os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        provider = TracerProvider(resource=Resource.create({"service.name": "radixgate"}))
        return provider.get_tracer("radixgate.gateway"), None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "radixgate")})
    provider = TracerProvider(resource=resource)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    for env_exporter in _exporters_from_env():
        provider.add_span_processor(BatchSpanProcessor(env_exporter))
    return provider.get_tracer("radixgate.gateway"), provider


def start_request_span(
    tracer: Tracer, operation: str, model: str, tenant: str, template: str, sampling: dict[str, Any]
) -> Span:
    """The request span, named as the GenAI conventions say: `{operation} {model}`; the child of
    the current span (the caller's, from `traceparent`) when there is one."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.system": "radixgate",
        "gen_ai.provider.name": "radixgate",
        "gen_ai.request.model": model,
        "radixgate.tenant": tenant,
        "radixgate.prompt_template": template,
    }
    for key in ("max_tokens", "temperature", "top_p", "seed"):
        if sampling.get(key) is not None:
            attributes[f"gen_ai.request.{key}"] = sampling[key]
    return tracer.start_span(f"{operation} {model}", kind=SpanKind.SERVER, attributes=attributes)


def _ns(stamp: float | None) -> int | None:
    return int(stamp * 1e9) if stamp is not None else None


def finish_request_span(
    tracer: Tracer,
    span: Span,
    *,
    model: str,
    rid: str,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    finish_reason: str,
    times: dict[str, float],
) -> None:
    """Usage attributes, and queue / prefill / decode child spans from the engine's time stamps."""
    span.set_attribute("gen_ai.response.model", model)
    span.set_attribute("gen_ai.response.id", rid)
    span.set_attribute("gen_ai.usage.input_tokens", prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", completion_tokens)
    span.set_attribute("gen_ai.usage.cache_read.input_tokens", cached_tokens)
    span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
    context = set_span_in_context(span)
    phases = (
        ("queue", "arrival", "scheduled"),
        ("prefill", "scheduled", "first_token"),
        ("decode", "first_token", "finished"),
    )
    for name, start_key, end_key in phases:
        start, end = _ns(times.get(start_key)), _ns(times.get(end_key))
        if start is not None and end is not None and end >= start:
            tracer.start_span(f"radixgate.{name}", context=context, start_time=start).end(end_time=end)
    span.end()


def fail_request_span(span: Span, error_type: str, message: str) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, message))
    span.end()
