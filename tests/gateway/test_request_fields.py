"""Walks the request-field table (gateway/api/request_fields.py, rendered into docs/gateway.md): the
table is current and covers every field of the pinned openai package; each honoured field with an
example changes the answer or its shape; each 400 field is refused naming it, and its neutral
values are accepted; unknown keys are ignored at the top level and refused in sampling_params."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from radixgate.bench import field_table
from radixgate.gateway.api.request_fields import HONOURED, REJECTED, ROUTE_TABLES

PROMPT = "the cat sat on the mat and the cat sat on the"
BASE: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "tiny",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 2,
        "temperature": 0,
    },
    "/v1/completions": {"model": "tiny", "prompt": PROMPT, "max_tokens": 2, "temperature": 0},
    "/generate": {"text": PROMPT, "sampling_params": {"max_new_tokens": 2, "temperature": 0}},
}
LIMIT = {"/v1/chat/completions": "max_tokens", "/v1/completions": "max_tokens", "/generate": "max_new_tokens"}
EOS, FORCED = "EOS", 42  # placeholders in CONTEXT: the tokenizer's EOS id, a token forced by logit_bias
# Fields whose effect shows only next to another field: sent with it in both requests.
CONTEXT: dict[str, dict[str, Any]] = {
    "top_logprobs": {"logprobs": True},
    "top_logprobs_num": {"return_logprob": True},
    "logprob_start_len": {"return_logprob": True},
    "return_text_in_logprobs": {"return_logprob": True},
    "ignore_eos": {"logit_bias": {EOS: 100}},
    "min_tokens": {"logit_bias": {EOS: 100}},
    "min_new_tokens": {"logit_bias": {EOS: 100}},
    "stop_token_ids": {"logit_bias": {str(FORCED): 100}},
    "stop": {"logit_bias": {str(FORCED): 100}},  # token 42 is "K"
}
# Sampling fields are walked against a seeded sample rather than the greedy answer.
SAMPLED = {"top_p", "top_k", "min_p", "seed", "sampling_seed"}
# Honoured fields without an example, and where their effect is tested.
COVERED_ELSEWHERE = {
    "model": "test_openai_routes.py::test_served_model_name",
    "messages": "every chat test",
    "prompt": "test_openai_routes.py::test_completions_accepts_text_ids_and_batches",
    "metadata": "test_prompt_stats.py",
    "tools": "test_tool_calls.py",
    "tool_choice": "test_tool_calls.py",
    "parallel_tool_calls": "test_tool_calls.py",
    "json_any_whitespace": "tests/engine/runner/test_grammar.py",
    "text": "test_native_routes.py::test_generate_text_and_ids",
    "input_ids": "test_native_routes.py::test_generate_text_and_ids",
    "sampling_params": "this walk",
    "skip_special_tokens": "tests/engine/runner/test_sampling.py",
    "cache_diagnostics": "test_cache_diagnostics.py",
    "stream_options": "test_openai_routes.py::test_stream_without_include_usage_has_no_usage_field",
    "priority": "test_retention_routes.py, tests/engine/scheduler/test_priority.py",
    "cache_ttl": "test_retention_routes.py",
    "cache_pins": "test_retention_routes.py",
    "cache_credit": "test_template_credit_routes.py",
    "prompt_cache_options": "test_retention_routes.py",
    "prompt_cache_retention": "test_retention_routes.py",
    "bootstrap_host": "test_pd_worker.py",
    "bootstrap_port": "test_pd_worker.py",
    "bootstrap_room": "test_pd_worker.py",
}


# The chat baseline does not repeat itself in two tokens (the completion ones do): a negative
# penalty, which makes it repeat, shows the field at work there.
EXAMPLES = {
    ("/v1/chat/completions", "frequency_penalty"): -2.0,
    ("/v1/chat/completions", "presence_penalty"): -2.0,
    ("/v1/chat/completions", "repetition_penalty"): 0.3,
}
_BASELINES: dict[str, Any] = {}


def _post(client: TestClient, route: str, field: str, value: Any, eos: int, *, baseline: bool = True) -> Any:
    """(the answer without `field`, the answer with it); a neutral-value check generates one token."""
    path = "/generate" if route.startswith("/generate") else route
    body = json.loads(json.dumps(BASE[path]))
    sampling = body["sampling_params"] if path == "/generate" else body
    target = sampling if route == "/generate sampling_params" else body
    if not baseline:
        sampling[LIMIT[path]] = 1
    if field in SAMPLED:
        sampling["temperature"] = 1.0
        seed_key = field if field in ("seed", "sampling_seed") else "seed" if path != "/generate" else "sampling_seed"
        sampling.setdefault(seed_key, 1)
    for key, extra in CONTEXT.get(field, {}).items():
        if key == "logit_bias":
            extra = {str(eos) if k == EOS else k: v for k, v in extra.items()}
        (sampling if key in ("logit_bias",) else target)[key] = extra
    before = None
    if baseline:  # the same request without the field: asked once (greedy and seeded answers repeat)
        key = path + json.dumps(body, sort_keys=True)
        before = _BASELINES.get(key) or _BASELINES.setdefault(key, _answer(client.post(path, json=body)))
    target[field] = value
    return before, client.post(path, json=body)


def _answer(r: Any) -> Any:
    """The response without what differs between identical requests (ids, times, cache hits)."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return ("stream", len(r.text.split("\n\n")))
    out = r.json()
    items = out if isinstance(out, list) else [out]
    for item in items:
        for key in ("id", "created", "usage", "system_fingerprint"):
            item.pop(key, None)
        meta = item.get("meta_info")
        if meta:
            for key in ("id", "e2e_latency", "cached_tokens"):
                meta.pop(key, None)
    return out


def test_the_table_in_the_docs_is_current_and_complete() -> None:
    assert field_table.missing_fields() == []
    assert field_table.main(["--check"]) == 0


CASES = [(route, name, rule) for route, table in ROUTE_TABLES.items() for name, rule in table.items()]


# /v1/messages and /v1/responses are walked by test_wire_fields.py (their bodies and error shapes differ)
@pytest.mark.parametrize("route", [route for route in ROUTE_TABLES if route.split()[0] in BASE])
def test_every_field_does_what_the_table_says(client: TestClient, worker, route: str) -> None:
    eos = worker.tokenizer.eos_token_id
    failures = []
    for name, rule in ROUTE_TABLES[route].items():
        if rule.status == HONOURED:
            if rule.example is None or name in COVERED_ELSEWHERE:
                assert name in COVERED_ELSEWHERE, f"{route} {name}: honoured, but no example and no test named"
                continue
            baseline, changed = _post(client, route, name, EXAMPLES.get((route, name), rule.example), eos)
            if changed.status_code != 200 or _answer(changed) == baseline:
                failures.append(f"{name}: {changed.status_code} {changed.text[:200]}")
        elif rule.status == REJECTED:
            _, refused = _post(client, route, name, rule.example, eos, baseline=False)
            error = refused.json().get("error", {}) if refused.status_code == 400 else {}
            if refused.status_code != 400 or name not in (error.get("param") or ""):
                failures.append(f"{name}: expected 400 naming it, got {refused.status_code} {refused.text[:200]}")
            for neutral in rule.neutral[1:]:  # None is the same as leaving the field out
                _, accepted = _post(client, route, name, neutral, eos, baseline=False)
                if accepted.status_code != 200:
                    failures.append(f"{name}={neutral!r}: neutral but {accepted.status_code} {accepted.text[:200]}")
    assert not failures, "\n".join(failures)


def test_unknown_fields(client: TestClient) -> None:
    chat = client.post("/v1/chat/completions", json={**BASE["/v1/chat/completions"], "no_such_field": 1})
    assert chat.status_code == 200  # ignored with a warning, as vLLM does
    body = {**BASE["/generate"], "sampling_params": {"max_new_tokens": 2, "no_such_key": 1}}
    r = client.post("/generate", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "sampling_params.no_such_key"
