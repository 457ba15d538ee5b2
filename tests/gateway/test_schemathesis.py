"""Fuzz every operation in the app's own OpenAPI schema: no input may cause a 5xx.

Bounded: a handful of examples per operation, and generated `max_tokens` values are clamped
so a valid request never decodes thousands of tokens on the CPU. A long run draws more, at random:

    RADIXGATE_FUZZ_EXAMPLES=1000 pytest -s --timeout 7200 tests/gateway/test_schemathesis.py   # prints cases per status
"""

from __future__ import annotations

import collections
import os
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig

MAX_GENERATED_TOKENS = 4
EXAMPLES = int(os.environ.get("RADIXGATE_FUZZ_EXAMPLES", "12"))  # per operation


def _clamp(body: Any) -> None:
    """Keep fuzzed requests cheap (small outputs, few choices) and aimed past the model check."""
    if not isinstance(body, dict):
        return
    if "model" in body:
        body["model"] = "tiny"  # unknown models are a 404 before anything else; test the rest
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if _is_number(body.get(key)) and body[key] > MAX_GENERATED_TOKENS:  # 300.0 is a valid 300 too
            body[key] = MAX_GENERATED_TOKENS
    if isinstance(body.get("n"), int) and body["n"] > 2:
        body["n"] = 2
    if "messages" in body and body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_tokens"] = MAX_GENERATED_TOKENS  # chat's default would be up to 1024 tokens
    if ("input" in body or "previous_response_id" in body) and body.get("max_output_tokens") is None:
        body["max_output_tokens"] = MAX_GENERATED_TOKENS  # /v1/responses' default is up to the context
    sampling = body.get("sampling_params")
    if isinstance(sampling, dict) and _is_number(sampling.get("max_new_tokens")):
        sampling["max_new_tokens"] = min(sampling["max_new_tokens"], MAX_GENERATED_TOKENS)
    elif "text" in body or "input_ids" in body:
        body["sampling_params"] = {
            **(sampling if isinstance(sampling, dict) else {}),
            "max_new_tokens": MAX_GENERATED_TOKENS,
        }
    if isinstance(body.get("prompt"), list) and len(body["prompt"]) > 4:
        body["prompt"] = body["prompt"][:4]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def test_no_input_causes_a_server_error(worker) -> None:
    api = schemathesis.openapi.from_asgi("/openapi.json", create_app(GatewayConfig(), worker=worker))
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 10
    statuses: collections.Counter[int] = collections.Counter()
    for operation in operations:
        _fuzz(operation, statuses)
    print(f"\nschemathesis: {len(operations)} operations, {sum(statuses.values())} cases, by status {dict(statuses)}")
    assert statuses and max(statuses) < 500


def _fuzz(operation: Any, statuses: collections.Counter[int]) -> None:
    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=EXAMPLES <= 12,  # the bounded run in make test is the same every time; a long one is not
        phases=[Phase.explicit, Phase.generate],  # no shrinking: keeps a failure's report fast
        suppress_health_check=list(HealthCheck),
    )
    def check(case: schemathesis.Case) -> None:
        _clamp(case.body)
        response = case.call(timeout=60)
        statuses[response.status_code] += 1
        assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
        if response.status_code >= 400 and response.headers.get("content-type", [""])[0].startswith("application/json"):
            body = response.json()
            shape = {"type", "error"} if case.path.startswith("/v1/messages") else {"error"}  # Anthropic's
            assert set(body) == shape and body["error"]["message"], body
        case.validate_response(response, checks=[not_a_server_error])

    check()
