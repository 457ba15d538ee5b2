"""Bad input gets a 4xx with OpenAI's error body, never a 5xx."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


def _error(r) -> dict:
    body = r.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


def test_prompt_longer_than_context(client: TestClient, worker) -> None:
    prompt = "word " * (worker.context_len + 100)
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 2})
    assert r.status_code == 400
    error = _error(r)
    assert error["code"] == "context_length_exceeded" and "context" in error["message"]


def test_prompt_plus_output_longer_than_context(client: TestClient, worker) -> None:
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": worker.context_len})
    assert r.status_code == 400 and _error(r)["param"] == "max_tokens"


def test_malformed_json(client: TestClient) -> None:
    r = client.post(
        "/v1/chat/completions", content=b'{"model": "tiny", "messages": [', headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert _error(r)["code"] == "invalid_json"


def test_unknown_model(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404
    error = _error(r)
    assert error["code"] == "model_not_found" and "gpt-4o" in error["message"]


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_negative_max_tokens(client: TestClient, field: str) -> None:
    r = client.post(
        "/v1/chat/completions", json={"model": "tiny", field: -5, "messages": [{"role": "user", "content": "x"}]}
    )
    assert r.status_code == 400
    assert _error(r)["param"] == field


@pytest.mark.parametrize(
    "body",
    [
        {"model": "tiny", "messages": []},
        {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]},
        {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": -1},
        {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_p": 0},
        {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
        {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        {"messages": [{"role": "user", "content": "x"}]},
    ],
)
def test_invalid_chat_bodies(client: TestClient, body: dict) -> None:
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    _error(r)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "tiny", "prompt": []},
        {"model": "tiny", "prompt": [10**9]},
        {"model": "tiny", "prompt": "x", "suffix": "y"},
        {"model": "tiny", "prompt": "x", "top_k": 0},
    ],
)
def test_invalid_completion_bodies(client: TestClient, body: dict) -> None:
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 400, r.text
    _error(r)


def test_unknown_route_and_method(client: TestClient) -> None:
    r = client.get("/v2/nothing")
    assert r.status_code == 404 and _error(r)["type"] == "not_found_error"
    r = client.get("/v1/chat/completions")
    assert r.status_code == 405
    _error(r)


def test_oversized_body_gets_413(make_client) -> None:
    c = make_client(max_request_bytes=4096)
    r = c.post("/v1/completions", json={"model": "tiny", "prompt": "x" * 10000})
    assert r.status_code == 413
    assert _error(r)["code"] == "request_too_large"

    def chunks():  # no Content-Length: the limit still holds while reading
        for _ in range(10):
            yield b"x" * 1000

    r = c.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_generate_needs_exactly_one_prompt(client: TestClient) -> None:
    r = client.post("/generate", json={"sampling_params": {"max_new_tokens": 2}})
    assert r.status_code == 400
    r = client.post("/generate", json={"text": "a", "input_ids": [1], "sampling_params": {"max_new_tokens": 2}})
    assert r.status_code == 400
