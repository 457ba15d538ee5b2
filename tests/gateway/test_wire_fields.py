"""The field catalog (gateway/api/request_fields.py) on `/v1/messages`, `/v1/messages/count_tokens` and
`/v1/responses`: every `400` field is refused naming it, in the route's own error shape, and its
neutral values are accepted; each honoured field names the test that shows it at work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from radixgate.gateway.api.request_fields import HONOURED, REJECTED, ROUTE_TABLES

USER = [{"role": "user", "content": "the cat sat on the mat"}]
BASE: dict[str, dict[str, Any]] = {
    "/v1/messages": {"model": "tiny", "max_tokens": 1, "messages": USER},
    "/v1/messages/count_tokens": {"model": "tiny", "messages": USER},
    "/v1/responses": {"model": "tiny", "input": "the cat sat on the mat", "max_output_tokens": 1},
}
MESSAGES, RESPONSES = "test_messages_api.py", "test_responses_api.py"
HONOURED_IN = {
    "/v1/messages": {
        "model": MESSAGES + "::test_bad_requests_are_anthropic_errors",
        "messages": MESSAGES,
        "system": MESSAGES + "::test_system_blocks_with_cache_control_account_creation_then_reads",
        "tools": MESSAGES + "::test_forced_tool_call_then_tool_result_round_trip",
        "tool_choice": MESSAGES + "::test_forced_tool_call_then_tool_result_round_trip",
        "cache_control": MESSAGES + "::test_cache_control_is_checked_as_anthropic_does",
        "output_config": MESSAGES + "::test_output_config_format_is_a_grammar",
        "max_tokens": MESSAGES + "::test_stream_helper_assembles_text_and_tool_use",
        "stop_sequences": MESSAGES + "::test_stop_sequences_name_the_one_that_matched",
        "stream": MESSAGES + "::test_raw_event_sequence",
        "temperature": MESSAGES + "::test_sampling_fields_are_honoured",
        "top_p": MESSAGES + "::test_sampling_fields_are_honoured",
        "top_k": MESSAGES + "::test_sampling_fields_are_honoured",
        "diagnostics": MESSAGES + "::test_diagnostics_are_answered_never_dropped",
    },
    "/v1/responses": {
        "model": RESPONSES,
        "input": RESPONSES + "::test_string_and_item_inputs_with_instructions",
        "instructions": RESPONSES + "::test_string_and_item_inputs_with_instructions",
        "tools": RESPONSES + "::test_forced_function_tool",
        "tool_choice": RESPONSES + "::test_forced_function_tool",
        "parallel_tool_calls": RESPONSES + "::test_forced_function_tool",
        "text": RESPONSES + "::test_parse_and_stream_with_a_json_schema",
        "max_output_tokens": RESPONSES + "::test_string_and_item_inputs_with_instructions",
        "temperature": RESPONSES + "::test_sampling_fields_are_honoured",
        "top_p": RESPONSES + "::test_sampling_fields_are_honoured",
        "stream": RESPONSES + "::test_raw_stream_events_are_numbered_in_order",
        "previous_response_id": "test_responses_store.py::test_an_agent_session_reuses_the_cache",
        "store": "test_responses_store.py::test_store_false_keeps_nothing",
        "metadata": RESPONSES + "::test_string_and_item_inputs_with_instructions",
        "prompt_cache_options": RESPONSES + "::test_prompt_cache_fields",
        "prompt_cache_retention": "test_retention_routes.py::test_each_api_pins_what_it_marks_and_says_so",
    },
}
HONOURED_IN["/v1/messages/count_tokens"] = HONOURED_IN["/v1/messages"]


def _error(route: str, r: Any) -> str:
    """The field an error names: Anthropic's body has only a message, OpenAI's a `param`."""
    body = r.json()
    if route.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        return body["error"]["message"]
    return body["error"]["param"] or ""


@pytest.mark.parametrize("route", list(BASE))
def test_every_field_does_what_the_table_says(client: TestClient, route: str) -> None:
    failures = []
    for name, rule in ROUTE_TABLES[route].items():
        if rule.status == HONOURED:
            assert name in HONOURED_IN[route], f"{route} {name}: honoured, but no test named"
        if rule.status != REJECTED:
            continue
        refused = client.post(route, json={**BASE[route], name: rule.example})
        if refused.status_code != 400 or name not in _error(route, refused):
            failures.append(f"{name}: expected 400 naming it, got {refused.status_code} {refused.text[:200]}")
        for neutral in rule.neutral[1:]:
            accepted = client.post(route, json={**BASE[route], name: neutral})
            if accepted.status_code != 200:
                failures.append(f"{name}={neutral!r}: neutral but {accepted.status_code} {accepted.text[:200]}")
    assert not failures, "\n".join(failures)


def test_unknown_fields(client: TestClient) -> None:
    refused = client.post("/v1/messages", json={**BASE["/v1/messages"], "no_such_field": 1})
    assert refused.status_code == 400 and "no_such_field" in _error("/v1/messages", refused)
    ignored = client.post("/v1/responses", json={**BASE["/v1/responses"], "no_such_field": 1})
    assert ignored.status_code == 200  # ignored with a warning, as on chat


def test_the_named_tests_exist() -> None:
    here = Path(__file__).parent
    for route, named in HONOURED_IN.items():
        for field, where in named.items():
            path, _, name = where.partition("::")
            source = (here / path).read_text()
            assert not name or f"def {name}(" in source, f"{route} {field}: {where} does not exist"


def test_both_apis_take_the_chat_path(client: TestClient, spans) -> None:
    """Spans, request metrics and refusal counts as chat has them, under the APIs' own endpoint labels."""
    messages = client.post("/v1/messages", json=BASE["/v1/messages"], headers={"x-radixgate-prompt-template": "w1"})
    responses = client.post("/v1/responses", json={**BASE["/v1/responses"], "metadata": {"prompt_template": "w2"}})
    assert messages.status_code == responses.status_code == 200
    client.post("/v1/messages", json={**BASE["/v1/messages"], "thinking": {"type": "enabled"}})
    client.post("/v1/responses", json={**BASE["/v1/responses"], "background": True})
    traced = {s.attributes["radixgate.prompt_template"]: s for s in spans.get_finished_spans() if s.name == "chat tiny"}
    for template, output in (("w1", messages.json()["usage"]["output_tokens"]), ("w2", 1)):
        assert traced[template].attributes["gen_ai.usage.output_tokens"] == output
    metrics = client.get("/metrics").text
    for endpoint in ("messages", "responses"):
        assert f'radixgate:requests_total{{endpoint="{endpoint}",model_name="tiny",outcome="ok"}} 1.0' in metrics
        assert f'endpoint="{endpoint}",model_name="tiny",outcome="unsupported",status_code="400"' in metrics
