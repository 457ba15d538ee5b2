"""Requests that used to stop the engine for good, or answer 500: each is now a 400 naming the field
(or, failing inside the engine, a 500 for that request alone), and the engine serves the next one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

COMPLETION = {"model": "tiny", "prompt": "poison check", "max_tokens": 2, "temperature": 1.0}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "poison check"}], "max_tokens": 2}
GENERATE = {"text": "poison check", "sampling_params": {"max_new_tokens": 2, "temperature": 1.0}}


def _still_serves(client: TestClient) -> None:
    assert client.get("/health").status_code == 200
    r = client.post("/generate", json={**GENERATE, "sampling_params": {"max_new_tokens": 2, "seed": 7}})
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["completion_tokens"] == 2


def _refused(response: Any, field: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert field in (error["param"] or "") or field in error["message"], error


def _raw(client: TestClient, path: str, text: str) -> Any:
    """Posts JSON text as written (NaN, Infinity and 1e999 are not what json.dumps writes)."""
    return client.post(path, content=text.encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 10**30])
def test_a_seed_the_engine_cannot_take_is_a_400_and_it_serves_on(client: TestClient, seed: int) -> None:
    _refused(client.post("/v1/completions", json={**COMPLETION, "seed": seed}), "seed")
    _refused(client.post("/v1/chat/completions", json={**CHAT, "temperature": 1.0, "seed": seed}), "seed")
    sp = {**GENERATE["sampling_params"], "seed": seed}
    _refused(client.post("/generate", json={**GENERATE, "sampling_params": sp}), "seed")
    sp = {**GENERATE["sampling_params"], "sampling_seed": seed}
    _refused(client.post("/generate", json={**GENERATE, "sampling_params": sp}), "sampling_seed")
    _still_serves(client)


def test_seeds_at_the_bounds_are_served(client: TestClient) -> None:
    for seed in (2**64 - 1, -(2**63), -1):
        r = client.post("/v1/completions", json={**COMPLETION, "seed": seed})
        assert r.status_code == 200, r.text
    _still_serves(client)


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_non_finite_temperature_is_a_400(client: TestClient, literal: str) -> None:
    generate = '{"text": "poison check", "sampling_params": {"max_new_tokens": 2, "temperature": TEMPERATURE}}'
    _refused(_raw(client, "/generate", generate.replace("TEMPERATURE", literal)), "temperature")
    completion = json.dumps(COMPLETION)[:-1] + f', "temperature": {literal}}}'
    _refused(_raw(client, "/v1/completions", completion), "temperature")
    _still_serves(client)


# Every numeric field at a value past what the engine can honour: a 400 that names it.
OUT_OF_RANGE = [
    ("/generate", {"sampling_params": {"top_k": 2**63}}, "top_k"),
    ("/generate", {"sampling_params": {"max_new_tokens": 2**70}}, "max_new_tokens"),
    ("/generate", {"sampling_params": {"min_new_tokens": 10**20}}, "min_new_tokens"),
    ("/generate", {"sampling_params": {"min_new_tokens": 1, "stop_token_ids": [10**9]}}, "stop_token_ids"),
    ("/generate", {"sampling_params": {"logit_bias": {"5": 101}}}, "logit_bias"),
    ("/generate", {"sampling_params": {"logit_bias": {"99999999999": 1}}}, "logit_bias"),
    ("/generate", {"sampling_params": {"n": 10**6}}, "n"),
    ("/generate", {"return_logprob": True, "top_logprobs_num": 10**9}, "top_logprobs_num"),
    ("/generate", {"return_logprob": True, "logprob_start_len": 10**12}, "logprob_start_len"),
    ("/generate", {"input_ids": [2**70], "text": None}, "outside the vocabulary"),
    ("/v1/completions", {"top_k": 2**64}, "top_k"),
    ("/v1/completions", {"n": 10**20}, "n"),
    ("/v1/completions", {"max_tokens": 10**30}, "max_tokens"),
    ("/v1/completions", {"logprobs": 10**10}, "logprobs"),
    ("/v1/completions", {"stop_token_ids": [2**70]}, "stop_token_ids"),
    ("/v1/completions", {"min_tokens": 10**20}, "min"),
    ("/v1/completions", {"prompt": [[2**70]]}, "outside the vocabulary"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 10**10}, "top_logprobs"),
    ("/v1/chat/completions", {"max_completion_tokens": 10**30}, "max_completion_tokens"),
    ("/v1/chat/completions", {"repetition_penalty": 10**9}, "repetition_penalty"),
    ("/v1/chat/completions", {"logit_bias": {"5": -1000}}, "logit_bias"),
]


@pytest.mark.parametrize("path, fields, name", OUT_OF_RANGE)
def test_numbers_out_of_range_are_a_400_naming_the_field(
    client: TestClient, path: str, fields: dict, name: str
) -> None:
    base = {"/generate": GENERATE, "/v1/completions": COMPLETION, "/v1/chat/completions": CHAT}[path]
    body = {**base, **fields}
    if "sampling_params" in fields:
        body["sampling_params"] = {**GENERATE["sampling_params"], **fields["sampling_params"]}
    body = {k: v for k, v in body.items() if v is not None}
    _refused(client.post(path, json=body), name)


NON_FINITE = [
    ("/v1/completions", '"frequency_penalty": NaN', "frequency_penalty"),
    ("/v1/completions", '"logit_bias": {"5": 1e999}', "logit_bias"),
    ("/v1/chat/completions", '"presence_penalty": -Infinity', "presence_penalty"),
    ("/v1/chat/completions", '"min_p": NaN', "min_p"),
    ("/v1/chat/completions", '"top_p": Infinity', "top_p"),
]


@pytest.mark.parametrize("path, member, name", NON_FINITE)
def test_non_finite_numbers_are_a_400_naming_the_field(client: TestClient, path: str, member: str, name: str) -> None:
    base = COMPLETION if path == "/v1/completions" else CHAT
    _refused(_raw(client, path, json.dumps(base)[:-1] + f", {member}}}"), name)


LONE_SURROGATE = "a\\ud800b"  # as JSON writes it: a valid escape, decoding to no character


@pytest.mark.parametrize(
    "path, body, name",
    [
        ("/v1/completions", '{"model": "tiny", "max_tokens": 1, "prompt": "%s"}', "prompt"),
        ("/v1/completions", '{"model": "tiny", "max_tokens": 1, "prompt": ["ok", "%s"]}', "prompt.1"),
        ("/v1/completions", '{"model": "tiny", "max_tokens": 1, "prompt": "ok", "stop": ["%s"]}', "stop.0"),
        ("/v1/chat/completions", '{"model": "tiny", "messages": [{"role": "user", "content": "%s"}]}', "content"),
        ("/generate", '{"text": "%s"}', "text"),
        ("/generate", '{"text": "ok", "metadata": {"prompt_template": "%s"}}', "metadata.prompt_template"),
        ("/tokenize", '{"prompt": "%s"}', "prompt"),
        ("/tokenize", '{"messages": [{"role": "user", "content": "%s"}]}', "messages.0.content"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(client: TestClient, path: str, body: str, name: str) -> None:
    _refused(_raw(client, path, body % LONE_SURROGATE), name)
    _still_serves(client)


def test_empty_messages_are_a_400(client: TestClient) -> None:
    _refused(client.post("/tokenize", json={"messages": []}), "messages")
    _refused(client.post("/v1/chat/completions", json={**CHAT, "messages": []}), "messages")
    _still_serves(client)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_messages_the_chat_template_cannot_render_are_a_400_on_tokenize(
    client: TestClient, add_generation_prompt: bool
) -> None:
    """Found by a long schemathesis run: a tool call without a function raised in the template."""
    messages = [{"role": "system", "content": None, "tool_calls": [{}]}]
    body = {"messages": messages, "add_generation_prompt": add_generation_prompt}
    _refused(client.post("/tokenize", json=body), "messages")


@pytest.mark.parametrize("stream", [False, True])
def test_a_failure_inside_the_engine_fails_that_request_alone(client: TestClient, worker, monkeypatch, stream) -> None:
    """Detokenization is made to fail for requests that keep special tokens: that request is a 500
    (an error event when streaming), its pages are freed, and the engine serves the next one."""
    real = worker.engine.detokenizer.decode

    def decode(ids: list[int], skip_special_tokens: bool = True) -> str:
        if not skip_special_tokens:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "broken bytes")
        return real(ids, skip_special_tokens)

    monkeypatch.setattr(worker.engine.detokenizer, "decode", decode)
    sp = {"max_new_tokens": 3, "temperature": 0, "skip_special_tokens": False}
    r = client.post("/generate", json={"text": "poison inside", "sampling_params": sp, "stream": stream})
    if stream:
        events = [json.loads(b[6:]) for b in r.text.split("\n\n") if b.startswith("data: {")]
        error = events[-1]["error"]
    else:
        assert r.status_code == 500, r.text
        error = r.json()["error"]
    assert error["code"] == "request_failed" and "detokenization" in error["message"], error
    worker.check_idle_invariant()  # its pages were freed
    _still_serves(client)
