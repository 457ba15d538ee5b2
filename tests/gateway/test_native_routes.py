"""SGLang's native endpoints: /generate, /health, /flush_cache, /server_info, /get_server_info."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient


def test_generate_text_and_ids(client: TestClient, worker) -> None:
    body = {"text": "native generate", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    r = client.post("/generate", json=body)
    assert r.status_code == 200
    out = r.json()
    meta = out["meta_info"]
    assert meta["completion_tokens"] == len(out["output_ids"]) == 4
    assert meta["prompt_tokens"] == len(worker.tokenize("native generate"))
    assert meta["finish_reason"] == {"type": "length", "length": 4}
    again = client.post(
        "/generate", json={"input_ids": worker.tokenize("native generate"), "sampling_params": body["sampling_params"]}
    ).json()
    assert again["output_ids"] == out["output_ids"]
    assert again["meta_info"]["cached_tokens"] > 0


def test_generate_stream_sends_cumulative_text(client: TestClient) -> None:
    r = client.post(
        "/generate",
        json={"text": "native stream", "stream": True, "sampling_params": {"max_new_tokens": 4, "temperature": 0}},
    )
    blocks = [b[len("data: ") :] for b in r.text.split("\n\n") if b]
    assert blocks[-1] == "[DONE]"
    events = [json.loads(b) for b in blocks[:-1]]
    texts = [e["text"] for e in events]
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False))
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert events[-1]["meta_info"]["completion_tokens"] == 4


def test_health(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}


def test_server_info_has_sglang_top_level_fields(client: TestClient) -> None:
    client.post("/v1/completions", json={"model": "tiny", "prompt": "info", "max_tokens": 1})
    for path in ("/server_info", "/get_server_info"):
        info = client.get(path).json()
        assert isinstance(info["cache_hit_rate"], float) and 0.0 <= info["cache_hit_rate"] <= 1.0
        assert info["token_usage"] == 0.0  # idle: cached tokens no request holds do not count
        assert info["max_total_num_tokens"] > 0
        assert info["served_model_name"] == "tiny"
        assert info["gateway"]["auth_enabled"] is False


def test_flush_cache_then_no_hit(client: TestClient, long_prefix) -> None:
    body = {"model": "tiny", "prompt": long_prefix("flush"), "max_tokens": 1}
    client.post("/v1/completions", json=body)
    assert client.post("/v1/completions", json=body).json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    r = client.post("/flush_cache")
    assert r.status_code == 200 and r.json()["success"] is True
    assert client.post("/v1/completions", json=body).json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_debug_endpoint_is_off_unless_enabled(client: TestClient, make_client) -> None:
    assert client.get("/debug/check_idle_invariant").status_code == 404
    assert make_client(enable_debug_endpoints=True).get("/debug/check_idle_invariant").json()["ok"] is True


def test_openapi_lists_the_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        "/generate",
        "/health",
        "/flush_cache",
        "/server_info",
        "/get_server_info",
        "/metrics",
        "/v1/prompt_stats",
        "/dashboard",
    ):
        assert path in paths, path


def test_a_fronts_request_id_may_pass_a_clients_limit_on_the_worker_channel(client: TestClient, make_client) -> None:
    """A front sends its workers `<tenant hash>/<client rid>` (and `~retryN` on a PD retry): a client
    id at the 128-character limit must still reach the worker; a client past it is a 400 naming rid."""
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 1}}
    longest_client_id = "c" * 128
    assert client.post("/generate", json={**body, "rid": longest_client_id}).status_code == 200
    refused = client.post("/generate", json={**body, "rid": longest_client_id + "c"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "rid"
    worker_side = make_client(worker_api_key="worker-key-0123456789")
    from_front = f"{'a' * 12}/{longest_client_id}~retry9"
    headers = {"Authorization": "Bearer worker-key-0123456789"}
    assert worker_side.post("/generate", json={**body, "rid": from_front}, headers=headers).status_code == 200
    refused = worker_side.post("/generate", json={**body, "rid": "w" * 158}, headers=headers)
    assert refused.status_code == 400 and "at most 157" in refused.json()["error"]["message"]
