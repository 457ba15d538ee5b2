"""Logprobs and echo on the OpenAI routes, the tokenizer endpoints, failed-request metrics and
system_fingerprint."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient


def test_chat_logprobs_greedy_token_is_the_best_alternative(client: TestClient) -> None:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "logprobs please"}],
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
    }
    out = client.post("/v1/chat/completions", json=body).json()
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"] == 4
    for entry in content:
        assert len(entry["top_logprobs"]) == 3
        assert entry["logprob"] == max(t["logprob"] for t in entry["top_logprobs"]) <= 0.0
        assert entry["token"] == entry["top_logprobs"][0]["token"]
        assert entry["bytes"] == list(entry["token"].encode())
    assert "".join(e["token"] for e in content) == out["choices"][0]["message"]["content"]
    assert out["system_fingerprint"].startswith("fp_")
    # streamed: the same numbers, token by token
    r = client.post("/v1/chat/completions", json={**body, "stream": True})
    chunks = [json.loads(b[6:]) for b in r.text.split("\n\n") if b.startswith("data: {")]
    streamed = [e for c in chunks for ch in c["choices"] if ch.get("logprobs") for e in ch["logprobs"]["content"]]
    assert len(streamed) == len(content)  # the same numbers, within what a prefix hit changes in float32
    assert max(abs(a["logprob"] - b["logprob"]) for a, b in zip(streamed, content, strict=True)) < 1e-4


def test_completion_echo_gives_one_logprob_per_prompt_token_also_on_a_prefix_hit(client: TestClient, worker) -> None:
    prompt = "Echo test: the quick brown fox jumps over the lazy dog, again and again."
    n = len(worker.tokenize(prompt))
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True}
    first = client.post("/v1/completions", json=body).json()
    warm = client.post("/v1/completions", json={**body, "echo": False, "max_tokens": 2}).json()
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # the prompt is in the cache now
    again = client.post("/v1/completions", json=body).json()
    for out in (first, again):
        lp = out["choices"][0]["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == n + 1
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert all(v is not None and v <= 0 for v in lp["token_logprobs"][1:])
        assert out["choices"][0]["text"].startswith(prompt)
        assert lp["text_offset"][0] == 0 and "".join(lp["tokens"]) == out["choices"][0]["text"]
        # the greedy output token's logprob is the best of its alternatives (lm-eval's is_greedy check)
        assert lp["token_logprobs"][-1] == max(lp["top_logprobs"][-1].values())
    a, b = first["choices"][0]["logprobs"]["token_logprobs"], again["choices"][0]["logprobs"]["token_logprobs"]
    assert max(abs(x - y) for x, y in zip(a[1:], b[1:], strict=True)) < 1e-4
    plain = client.post("/v1/completions", json={**body, "logprobs": None}).json()
    assert plain["choices"][0]["logprobs"] is None and plain["choices"][0]["text"].startswith(prompt)


def test_tokenize_detokenize_and_tokenizer_info(client: TestClient, worker) -> None:
    r = client.post("/tokenize", json={"model": "tiny", "prompt": "hello tokenizer", "return_token_strs": True})
    out = r.json()
    assert out["tokens"] == worker.tokenize("hello tokenizer") and out["count"] == len(out["tokens"])
    assert "".join(out["token_strs"]) == "hello tokenizer" and out["max_model_len"] == worker.context_len
    assert client.post("/detokenize", json={"tokens": out["tokens"]}).json() == {"prompt": "hello tokenizer"}
    chat = client.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert chat["tokens"] == worker.tokenize(
        worker.render_chat([{"role": "user", "content": "hi"}]), add_special_tokens=False
    )
    info = client.get("/tokenizer_info").json()
    assert info["eos_token"] == worker.tokenizer.eos_token and "{%" in info["chat_template"]
    assert client.post("/detokenize", json={"tokens": [10**8]}).status_code == 400


def test_rejections_are_counted_by_outcome_and_status(client: TestClient) -> None:
    def failed(outcome: str, status: str) -> float:
        prefix = f'radixgate:failed_requests_total{{endpoint="completions",model_name="tiny",outcome="{outcome}",'
        for line in client.get("/metrics").text.splitlines():
            if line.startswith(prefix) and f'status_code="{status}"' in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = failed("unsupported", "400"), failed("invalid", "400"), failed("not_found", "404")
    assert client.post("/v1/completions", json={"model": "tiny", "prompt": "x", "best_of": 3}).status_code == 400
    assert client.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": -1}).status_code == 400
    assert client.post("/v1/completions", json={"model": "nope", "prompt": "x"}).status_code == 404
    after = failed("unsupported", "400"), failed("invalid", "400"), failed("not_found", "404")
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1, 1]


def test_chat_without_max_tokens_may_run_to_the_context(client: TestClient, worker) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 10}], "max_tokens": None}
    # a prompt that leaves no room for output is refused rather than silently capped
    long = {"model": "tiny", "messages": [{"role": "user", "content": "word " * (worker.context_len + 10)}]}
    r = client.post("/v1/chat/completions", json=long)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = client.post("/v1/chat/completions", json={**body, "max_tokens": 2, "min_tokens": 2})
    assert r.json()["usage"]["completion_tokens"] == 2


def test_refusals_before_routing_are_counted_too(make_client) -> None:
    c = make_client(max_request_bytes=4096)

    def too_large() -> float:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith("radixgate:failed_requests_total") and 'outcome="too_large"' in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = too_large()
    assert c.post("/v1/completions", json={"model": "tiny", "prompt": "x" * 10000}).status_code == 413
    assert too_large() == before + 1
