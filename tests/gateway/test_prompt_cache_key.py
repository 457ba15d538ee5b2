"""OpenAI's `prompt_cache_key`: accepted on both endpoints and passed on as the router's hint."""

from __future__ import annotations

from fastapi.testclient import TestClient

from radixgate.gateway.api.openai_requests import work_request
from radixgate.gateway.api.openai_schemas import ChatCompletionRequest, CompletionRequest


def test_prompt_cache_key_is_parsed_and_becomes_the_route_hint() -> None:
    chat = ChatCompletionRequest.model_validate(
        {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "k1"}
    )
    assert chat.prompt_cache_key == "k1"
    assert work_request(chat, "r", [1, 2], 4, None, 0).route_hint == "k1"
    plain = CompletionRequest.model_validate({"model": "tiny", "prompt": "hi", "metadata": {"static_prefix_hash": "h"}})
    assert plain.prompt_cache_key is None and work_request(plain, "r", [1], 4, None, 0).route_hint == "h"


def test_single_engine_gateway_accepts_the_field(client: TestClient) -> None:
    for path, body in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "cache key check"}]}),
        ("/v1/completions", {"prompt": "cache key check"}),
    ):
        r = client.post(path, json={"model": "tiny", "max_tokens": 2, "prompt_cache_key": "support-bot-3f2a", **body})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 2
