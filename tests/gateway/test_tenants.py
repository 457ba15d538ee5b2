"""API keys, tenant-salted caches, rate limits, the queue limit."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from radixgate.gateway.app import app_state

KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keyed(make_client) -> TestClient:
    return make_client(api_keys=KEYS)


def _cached(c: TestClient, key: str, prompt: str, **extra) -> int:
    r = c.post(
        "/v1/completions", headers=_auth(key), json={"model": "tiny", "prompt": prompt, "max_tokens": 1, **extra}
    )
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_every_endpoint_but_health_needs_a_key(keyed: TestClient) -> None:
    assert keyed.get("/health").status_code == 200
    for method, path in (
        ("GET", "/v1/models"),
        ("GET", "/metrics"),
        ("GET", "/server_info"),
        ("GET", "/v1/prompt_stats"),
        ("POST", "/v1/completions"),
        ("POST", "/generate"),
        ("POST", "/flush_cache"),
        ("GET", "/dashboard/data"),
        ("GET", "/openapi.json"),
    ):
        r = keyed.request(method, path)
        assert r.status_code == 401, path
        assert r.json()["error"]["code"] == "invalid_api_key"
    assert keyed.get("/v1/models", headers=_auth("wrong")).status_code == 401
    assert keyed.get("/v1/models", headers={"Authorization": "Basic key-a"}).status_code == 401
    assert keyed.get("/v1/models", headers=_auth("key-a")).status_code == 200


def test_tenants_do_not_share_cached_prefixes(keyed: TestClient, long_prefix) -> None:
    prompt = long_prefix("isolation")
    assert _cached(keyed, "key-a", prompt) == 0
    assert _cached(keyed, "key-a", prompt) > 0
    # Same prompt from tenant B: no hit, even when B names A's salt itself.
    assert _cached(keyed, "key-b", prompt, cache_salt="tenant:tenant-a", extra_body={"cache_salt": "x"}) == 0
    assert _cached(keyed, "key-b", prompt) > 0


def test_without_keys_the_cache_is_shared(client: TestClient, long_prefix) -> None:
    prompt = long_prefix("open-server")
    client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 1})
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 1, "cache_salt": "z"})
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_prompt_stats_are_per_tenant(keyed: TestClient) -> None:
    for key, template in (("key-a", "a-only"), ("key-b", "b-only")):
        keyed.post(
            "/v1/completions",
            headers=_auth(key),
            json={
                "model": "tiny",
                "prompt": f"stats {template}",
                "max_tokens": 1,
                "metadata": {"prompt_template": template},
            },
        )
    seen_a = {t["template"] for t in keyed.get("/v1/prompt_stats", headers=_auth("key-a")).json()["templates"]}
    seen_b = {t["template"] for t in keyed.get("/v1/prompt_stats", headers=_auth("key-b")).json()["templates"]}
    assert "a-only" in seen_a and "b-only" not in seen_a
    assert "b-only" in seen_b and "a-only" not in seen_b


def test_request_rate_limit_answers_429_per_tenant(make_client) -> None:
    c = make_client(api_keys=KEYS, rate_limit_rpm=2)
    body = {"model": "tiny", "prompt": "rate", "max_tokens": 1}
    assert [c.post("/v1/completions", headers=_auth("key-a"), json=body).status_code for _ in range(2)] == [200, 200]
    r = c.post("/v1/completions", headers=_auth("key-a"), json=body)
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) >= 1
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert c.post("/v1/completions", headers=_auth("key-b"), json=body).status_code == 200


def test_token_rate_limit_bills_prompt_and_output(make_client) -> None:
    c = make_client(rate_limit_tpm=100)
    body = {"model": "tiny", "prompt": "tokens " * 60, "max_tokens": 50, "ignore_eos": True}
    assert c.post("/v1/completions", json=body).status_code == 200  # 60 + 50 tokens: the bucket is now negative
    r = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1})
    assert r.status_code == 429 and "tokens" in r.json()["error"]["message"]
    assert int(r.headers["Retry-After"]) >= 1


def test_full_queue_answers_503(make_client) -> None:
    c = make_client(max_queued_requests=1)
    app_state(c.app).num_queued = 1  # as if one request were waiting for its first token
    r = c.post("/v1/completions", json={"model": "tiny", "prompt": "queue", "max_tokens": 1})
    assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    assert r.json()["error"]["code"] == "queue_full"
    app_state(c.app).num_queued = 0
    assert c.post("/v1/completions", json={"model": "tiny", "prompt": "queue", "max_tokens": 1}).status_code == 200
    assert app_state(c.app).num_queued == 0


def test_api_keys_file_formats(tmp_path) -> None:
    from radixgate.gateway.tenancy.auth import load_api_keys_file

    (tmp_path / "keys.json").write_text('{"k1": "t1", "k2": "t2"}')
    (tmp_path / "keys.txt").write_text("# key tenant\nk1 t1\n\nk2 t2  # second\n")
    assert (
        load_api_keys_file(tmp_path / "keys.json")
        == load_api_keys_file(tmp_path / "keys.txt")
        == {"k1": "t1", "k2": "t2"}
    )
    (tmp_path / "bad.txt").write_text("k1\n")
    with pytest.raises(ValueError, match="bad.txt:1"):
        load_api_keys_file(tmp_path / "bad.txt")
