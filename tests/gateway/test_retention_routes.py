"""Priority and TTL pins on every route that has them, over the shared engine: a non-zero priority
is a 400 naming it unless the engine schedules by priority; each API's pin spelling pins the prefix
it marks and the answer says so (`meta_info.cache_pins` / `usage.cache_pins`); `prompt_cache_retention`
caps a pin; a bad ttl is a 400 naming the field and the accepted forms; /server_info and /metrics
show the pinned tokens."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

CHAT = {"model": "tiny", "max_tokens": 1, "temperature": 0}


@pytest.fixture
def pinning(client: TestClient) -> Iterator[TestClient]:
    """The client, with every pin this test made dropped afterwards (a flush releases pins)."""
    yield client
    assert client.post("/flush_cache").status_code == 200


@pytest.fixture
def priority_on(worker) -> Iterator[None]:
    scheduler = worker.engine.scheduler
    before = scheduler.config
    scheduler.config = dataclasses.replace(before, enable_priority_scheduling=True)
    yield
    scheduler.config = before


def _bodies(tag: str, **extra: Any) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        "generate": ("/generate", {"text": f"{tag} native", "sampling_params": {"max_new_tokens": 1}, **extra}),
        "chat": ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": f"{tag} chat"}], **extra}),
        "completions": ("/v1/completions", {**CHAT, "prompt": f"{tag} completion", **extra}),
    }


def test_priority_without_priority_scheduling_is_a_400_naming_it(client: TestClient) -> None:
    for name, (path, body) in _bodies("prio-off", priority=2).items():
        r = client.post(path, json=body)
        assert r.status_code == 400, name
        error = r.json()["error"]
        assert error["param"] == "priority" and "--enable-priority-scheduling" in error["message"], name
    for name, (path, body) in _bodies("prio-zero", priority=0).items():
        assert client.post(path, json=body).status_code == 200, name
    for name, (path, body) in _bodies("prio-bad", priority="high").items():
        r = client.post(path, json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "priority", name


def test_priority_is_served_under_priority_scheduling(client: TestClient, priority_on: None) -> None:
    for name, (path, body) in _bodies("prio-on", priority=7).items():
        assert client.post(path, json=body).status_code == 200, name


def test_each_api_pins_what_it_marks_and_says_so(pinning: TestClient, long_prefix) -> None:
    client = pinning
    doc = long_prefix("pin-routes", sentences=8)
    r = client.post(
        "/generate", json={"text": doc + " native", "sampling_params": {"max_new_tokens": 1}, "cache_ttl": "1h"}
    )
    (pin,) = r.json()["meta_info"]["cache_pins"]
    assert pin["pinned"] and pin["ttl_s"] == 3600.0 and pin["tokens"] == r.json()["meta_info"]["prompt_tokens"]
    chat = {**CHAT, "messages": [{"role": "user", "content": doc + " chat"}], "prompt_cache_options": {"ttl": "2h"}}
    capped = client.post("/v1/chat/completions", json={**chat, "prompt_cache_retention": "in_memory"}).json()
    assert capped["usage"]["cache_pins"][0] | {"tokens": 0} == {
        "tokens": 0,
        "ttl_s": 3600.0,
        "pinned": True,
        "reason": None,
    }
    completion = client.post("/v1/completions", json={**CHAT, "prompt": doc, "prompt_cache_options": {"ttl": "90s"}})
    assert completion.json()["usage"]["cache_pins"][0]["ttl_s"] == 90.0
    plain = client.post("/v1/completions", json={**CHAT, "prompt": doc + " plain"}).json()
    assert "cache_pins" not in plain["usage"] and "cache_pins" not in plain
    system = [{"type": "text", "text": doc, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    message = {"model": "tiny", "max_tokens": 1, "system": system, "messages": [{"role": "user", "content": "hi"}]}
    (anthropic,) = client.post("/v1/messages", json=message).json()["usage"]["cache_pins"]
    assert anthropic["pinned"] and anthropic["ttl_s"] == 3600.0 and 0 < anthropic["tokens"] < 200
    response = {
        "model": "tiny",
        "input": doc + " responses",
        "max_output_tokens": 1,
        "prompt_cache_options": {"ttl": "30m"},
    }
    (openai_pin,) = client.post("/v1/responses", json=response).json()["usage"]["cache_pins"]
    assert openai_pin["pinned"] and openai_pin["ttl_s"] == 1800.0
    info = client.get("/server_info").json()
    assert info["num_pins"] >= 5 and info["pinned_tokens_device"] >= pin["tokens"]
    metrics = client.get("/metrics").text
    line = next(x for x in metrics.splitlines() if x.startswith('radixgate:pinned_tokens{tier="device"}'))
    assert float(line.split()[-1]) == info["pinned_tokens_device"]


def test_a_bad_ttl_is_a_400_naming_the_field_and_the_forms(client: TestClient) -> None:
    cases = [
        ("/generate", {"text": "ttl", "cache_ttl": "forever"}, "cache_ttl"),
        ("/generate", {"text": "ttl", "cache_ttl": "25h"}, "cache_ttl"),
        ("/generate", {"text": "ttl", "cache_pins": [[4, "soon"]]}, "cache_pins.0"),
        (
            "/v1/chat/completions",
            {**CHAT, "messages": [{"role": "user", "content": "t"}], "prompt_cache_options": {"ttl": "7d"}},
            "prompt_cache_options.ttl",
        ),
        (
            "/v1/chat/completions",
            {**CHAT, "messages": [{"role": "user", "content": "t"}], "prompt_cache_retention": "7d"},
            "prompt_cache_retention",
        ),
        (
            "/v1/responses",
            {"model": "tiny", "input": "t", "prompt_cache_options": {"ttl": 5}},
            "prompt_cache_options.ttl",
        ),
    ]
    for path, body, param in cases:
        r = client.post(path, json=body)
        assert r.status_code == 400, (path, body)
        error = r.json()["error"]
        assert error["param"] == param, (path, error)
        assert "'5m'" in error["message"] or "in_memory" in error["message"], error
    bad = {
        "model": "tiny",
        "max_tokens": 1,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "t", "cache_control": {"type": "ephemeral", "ttl": "2h"}}],
            }
        ],
    }
    r = client.post("/v1/messages", json=bad)
    assert r.status_code == 400 and "'5m' or '1h'" in r.json()["error"]["message"]


def test_tenant_weights_come_from_the_keys_file_and_reach_the_engine(make_client, worker, tmp_path) -> None:
    from radixgate.gateway.cli_retention import tenant_weights
    from radixgate.gateway.tenancy.auth import read_keys_file

    as_json = tmp_path / "keys.json"
    as_json.write_text('{"k1": {"tenant": "alice", "weight": 3}, "k2": "bob"}')
    as_lines = tmp_path / "keys.txt"
    as_lines.write_text("k1 alice tenant 3\nk2 bob\n")
    assert tenant_weights(str(as_json)) == tenant_weights(str(as_lines)) == {"alice": 3.0}
    bad = tmp_path / "bad.txt"
    bad.write_text("k1 alice tenant 0\n")
    with pytest.raises(ValueError, match="weight must be a number > 0"):
        read_keys_file(bad)
    client = make_client(api_keys={"k1": "alice", "k2": "bob"}, tenant_weights={"alice": 3.0})
    for key in ("k1", "k2"):
        body = {"text": f"weights {key}", "sampling_params": {"max_new_tokens": 1}}
        assert client.post("/generate", json=body, headers={"Authorization": f"Bearer {key}"}).status_code == 200
    weights = worker.engine.cache_manager.shares.weights
    assert weights["tenant:alice"] == 3.0 and "tenant:bob" not in weights
    weights.pop("tenant:alice")


def test_a_prompt_segment_pin_holds_the_static_part(pinning: TestClient, long_prefix) -> None:
    """`system(..., pin="1h")` travels as `metadata.static_prefix_ttl`; the gateway pins the static part."""
    import radixgate
    from radixgate import system, user

    sdk = radixgate.Client(base_url="http://testserver/v1", http_client=pinning, model="tiny")
    prompt = radixgate.Prompt(system(long_prefix("segment-pin", sentences=8), pin="1h"), template="pinned-bot")
    assert prompt.metadata(source="x.py:1")["static_prefix_ttl"] == "1h"
    before = pinning.get("/server_info").json()["num_pins"]
    sdk.chat(prompt.extend(user("What now?")), max_tokens=1, temperature=0)
    info = pinning.get("/server_info").json()
    assert info["num_pins"] == before + 1 and info["pinned_tokens_device"] > 0
    bad = {**CHAT, "messages": [{"role": "user", "content": "t"}], "metadata": {"static_prefix_ttl": "soon"}}
    r = pinning.post("/v1/chat/completions", json=bad)
    assert r.status_code == 400 and r.json()["error"]["param"] == "metadata.static_prefix_ttl"
