"""/v1/chat/completions, /v1/completions and /v1/models against the real tiny engine."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient


def _events(text: str) -> list:
    """SSE body -> decoded `data:` payloads; `[DONE]` stays a string."""
    out = []
    for block in text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            payload = block[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_chat_reports_cached_tokens_on_a_shared_prefix(client: TestClient, long_prefix) -> None:
    system = long_prefix("chat-cache")
    # The engine is the session's: other tests' chats share the template's first tokens. A cold cache first.
    assert client.post("/flush_cache", json={}).status_code == 200
    usages, prompts = [], []
    for question in ("first question?", "second question?"):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        prompts.append(client.post("/tokenize", json={"model": "tiny", "messages": messages}).json()["tokens"])
        r = client.post(
            "/v1/chat/completions",
            json={"model": "tiny", "max_tokens": 4, "temperature": 0, "messages": messages},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["role"] == "assistant"
        assert body["usage"]["completion_tokens"] == 4
        usages.append(body["usage"])
    assert [u["prompt_tokens"] for u in usages] == [len(p) for p in prompts]
    assert usages[0]["prompt_tokens_details"]["cached_tokens"] == 0
    # Exactly the two prompts' common prefix (the system turn, up to where the questions differ).
    common = next(i for i, (x, y) in enumerate(zip(*prompts, strict=False)) if x != y)
    assert usages[1]["prompt_tokens_details"]["cached_tokens"] == common > 0.8 * len(prompts[1])


def test_chat_stream_matches_openai_wire_format(client: TestClient) -> None:
    r = client.post(
        "/v1/chat/completions",
        json={
            "model": "tiny",
            "max_tokens": 5,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "stream format check"}],
        },
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [f["choices"][0]["finish_reason"] for f in finals] == ["length"]
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 5
    assert "cached_tokens" in usage_chunk["usage"]["prompt_tokens_details"]
    assert all(c["usage"] is None for c in chunks[:-1])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    full = client.post(
        "/v1/chat/completions",
        json={
            "model": "tiny",
            "max_tokens": 5,
            "temperature": 0,
            "messages": [{"role": "user", "content": "stream format check"}],
        },
    ).json()
    assert text == full["choices"][0]["message"]["content"]


def test_stream_without_include_usage_has_no_usage_field(client: TestClient) -> None:
    r = client.post(
        "/v1/completions", json={"model": "tiny", "prompt": "no usage please", "max_tokens": 3, "stream": True}
    )
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    assert all("usage" not in e for e in events[:-1])
    assert events[-2]["choices"][0]["finish_reason"] == "length"


def test_completions_accepts_text_ids_and_batches(client: TestClient, worker) -> None:
    r = client.post(
        "/v1/completions", json={"model": "tiny", "prompt": "Once upon a time", "max_tokens": 3, "temperature": 0}
    )
    assert r.status_code == 200
    text = r.json()["choices"][0]["text"]
    ids = worker.tokenize("Once upon a time")
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": ids, "max_tokens": 3, "temperature": 0})
    assert r.json()["choices"][0]["text"] == text
    r = client.post(
        "/v1/completions",
        json={"model": "tiny", "prompt": ["alpha beta", "gamma delta"], "max_tokens": 2, "n": 2, "temperature": 0},
    )
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["completion_tokens"] == 8


def test_completions_default_max_tokens_is_16(client: TestClient) -> None:
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "default length", "ignore_eos": True})
    assert r.json()["usage"]["completion_tokens"] == 16


def test_stop_sequence_cuts_the_text(client: TestClient) -> None:
    base = {"model": "tiny", "prompt": "stop sequence check", "max_tokens": 12, "temperature": 0}
    text = client.post("/v1/completions", json=base).json()["choices"][0]["text"]
    stop = text[len(text) // 2 : len(text) // 2 + 2] or text[:1]
    r = client.post("/v1/completions", json={**base, "stop": [stop]}).json()
    assert stop not in r["choices"][0]["text"]
    assert r["choices"][0]["finish_reason"] == "stop"


def test_seeded_sampling_repeats(client: TestClient) -> None:
    body = {"model": "tiny", "prompt": "seeded", "max_tokens": 6, "temperature": 1.0, "seed": 7}
    first = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    assert client.post("/v1/completions", json=body).json()["choices"][0]["text"] == first


def test_models(client: TestClient) -> None:
    body = client.get("/v1/models").json()
    assert body["object"] == "list" and body["data"][0]["id"] == "tiny"
    assert body["data"][0]["max_model_len"] > 0
    assert client.get("/v1/models/tiny").json()["id"] == "tiny"
    assert client.get("/v1/models/gpt-9").status_code == 404


def test_served_model_name(make_client) -> None:
    c = make_client(served_model_name="my-model")
    assert c.get("/v1/models").json()["data"][0]["id"] == "my-model"
    r = c.post("/v1/completions", json={"model": "my-model", "prompt": "alias", "max_tokens": 1})
    assert r.status_code == 200 and r.json()["model"] == "my-model"


def test_chat_stream_with_n_choices(client: TestClient) -> None:
    r = client.post(
        "/v1/chat/completions",
        json={
            "model": "tiny",
            "max_tokens": 3,
            "n": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "two choices"}],
        },
    )
    chunks = _events(r.text)[:-1]
    finished = sorted(c["choices"][0]["index"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
    assert finished == [0, 1]
    assert chunks[-1]["usage"]["completion_tokens"] == 6


def test_agent_messages_with_tools_render(client: TestClient) -> None:
    tool_call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    r = client.post(
        "/v1/chat/completions",
        json={
            "model": "tiny",
            "max_tokens": 2,
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
            "messages": [
                {"role": "user", "content": "find x"},
                {"role": "assistant", "content": None, "tool_calls": [tool_call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "x is 42"},
                {"role": "user", "content": [{"type": "text", "text": "and "}, {"type": "text", "text": "y?"}]},
            ],
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] > 10
