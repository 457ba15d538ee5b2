"""One span per request with GenAI attributes, and queue / prefill / decode children."""

from __future__ import annotations

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
