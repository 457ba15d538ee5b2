"""OpenTelemetry traces: one span per request with GenAI semantic-convention attributes,
and child spans for queueing, prefill and decode built from the engine's timestamps.

Exporters come from the standard environment variables (read here and nowhere else):
`OTEL_SDK_DISABLED=true` turns tracing off; `OTEL_TRACES_EXPORTER` is a comma list of
`console`, `otlp` (needs `opentelemetry-exporter-otlp` installed) or `none` (the default
here, since no collector is assumed); `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`
name the service. Tests pass their own exporter, e.g. `InMemorySpanExporter`.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context

logger = logging.getLogger("radixgate.gateway")


def _exporters_from_env() -> list[SpanExporter]:
    names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "console":
            exporters.append(ConsoleSpanExporter(out=sys.stdout))
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError:
                logger.warning(
                    "OTEL_TRACES_EXPORTER=otlp but opentelemetry-exporter-otlp is not installed; no traces are exported"
                )
                continue
            exporters.append(OTLPSpanExporter())
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
    """The request span, named as the GenAI conventions say: `{operation} {model}`."""
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
