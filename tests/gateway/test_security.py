"""What a tenant can learn and do: server info without secrets or topology, errors without internal
addresses, request ids per tenant, reserved tenant names, per-tenant caps on statistics rows."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.observe.metrics import OTHER_TEMPLATE, Metrics
from radixgate.gateway.observe.prompt_stats import OTHER, PromptStatsRecorder, RequestTags
from radixgate.gateway.tenancy.auth import Authenticator, read_keys_file
from radixgate.gateway.workers.pool import WorkerPool
from radixgate.gateway.workers.worker import LocalWorker

KEYS = {"key-a": "a", "key-b": "b"}
ADMIN = "admin-key"
REDIS_PASSWORD = "hunter2-redis-pw"
REDIS_URL = f"redis://rguser:{REDIS_PASSWORD}@redis.internal.example:6379/0"
MODEL_DIR = "/srv/private-models/llama-secret"
STORAGE_DIR = "/var/lib/radixgate/kv-secret"
EVENTS = {"endpoint": "tcp://10.11.12.13:5557", "replay_endpoint": "tcp://10.11.12.13:5558", "topic": "kv"}
DOWN_WORKERS = ("http://127.0.0.1:9", "openai+http://127.0.0.1:7")


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class _ConfiguredEngine:
    """The suite's engine as a server configured with secrets would describe itself: every call goes
    to the real engine; only `config` (what `/server_info` reads) is the secret-laden one."""

    def __init__(self, engine: Any, config: Any) -> None:
        self._engine, self.config = engine, config

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


@pytest.fixture
def configured(worker: LocalWorker) -> LocalWorker:
    extra = json.dumps({"url": REDIS_URL, "key_prefix": "rg"})
    fields = {
        "model_path": MODEL_DIR,
        "hicache_storage_dir": STORAGE_DIR,
        "hicache_storage_backend_extra_config": extra,
        "kv_events_config": json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", **EVENTS}),
    }
    config = dataclasses.replace(worker.engine.config)
    for name, value in fields.items():
        object.__setattr__(config, name, value)  # as given on the command line; nothing is opened
    return LocalWorker(_ConfiguredEngine(worker.engine, config))


def _assert_no_secret(text: str, secrets: tuple[str, ...]) -> None:
    for secret in secrets:
        assert secret not in text, secret


def test_a_tenant_sees_numbers_an_admin_the_configuration_without_credentials(
    configured: LocalWorker, spans: Any
) -> None:
    config = GatewayConfig(api_keys=KEYS, admin_api_keys=frozenset({ADMIN}))
    with TestClient(create_app(config, worker=configured, span_exporter=spans)) as client:
        for path in ("/server_info", "/get_server_info"):
            tenant = client.get(path, headers=_auth("key-a"))
            assert tenant.status_code == 200
            body = tenant.json()
            assert 0 <= body["cache_hit_rate"] <= 1 and 0 <= body["token_usage"] <= 1
            assert "engine_config" not in body
            _assert_no_secret(tenant.text, (REDIS_PASSWORD, "redis.internal", MODEL_DIR, STORAGE_DIR, "10.11.12.13"))
        admin = client.get("/server_info", headers=_auth(ADMIN))
        assert admin.json()["engine_config"]["model_path"] == MODEL_DIR  # the operator's view
        assert "redis.internal.example" in admin.text
        _assert_no_secret(admin.text, (REDIS_PASSWORD,))  # even an admin never reads a password


@pytest.fixture
def down_pool(worker: LocalWorker) -> Iterator[TestClient]:
    """A router whose only workers are unreachable addresses (tenants may use unsalted workers)."""
    pool = WorkerPool(worker.tokenizer, "tiny", allow_unsalted_workers=True)
    for url in DOWN_WORKERS:
        pool.add_remote(url)
    config = GatewayConfig(api_keys=KEYS, admin_api_keys=frozenset({ADMIN}), allow_unsalted_workers=True)
    with TestClient(create_app(config, worker=pool)) as client:
        yield client


def test_router_topology_and_worker_addresses_stay_with_admins(down_pool: TestClient) -> None:
    addresses = ("127.0.0.1:9", "127.0.0.1:7")
    info = down_pool.get("/server_info", headers=_auth("key-a"))
    assert info.status_code == 200 and "workers" not in info.json()
    _assert_no_secret(info.text, addresses)
    failed = down_pool.post("/v1/completions", headers=_auth("key-a"), json={"model": "tiny", "prompt": "x"})
    assert failed.status_code == 503, failed.text  # no worker could serve it: the message says so, not where
    _assert_no_secret(failed.text, addresses)
    health = down_pool.get("/health")
    _assert_no_secret(health.text, addresses)
    admin = down_pool.get("/server_info", headers=_auth(ADMIN))
    assert {w["url"] for w in admin.json()["workers"]} == set(DOWN_WORKERS)


def test_request_ids_are_per_tenant_and_taken_atomically(worker: LocalWorker) -> None:
    app = create_app(GatewayConfig(api_keys=KEYS), worker=worker)

    def generate(key: str, prompt: str) -> dict[str, Any]:
        return {
            "headers": _auth(key),
            "json": {"text": prompt, "rid": "shared-id", "sampling_params": {"max_new_tokens": 24, "temperature": 0}},
        }

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
            same = [http.post("/generate", **generate("key-a", f"rid race {i}")) for i in range(2)]
            other = http.post("/generate", **generate("key-b", "rid other tenant"))
            return list(await asyncio.gather(*same, other))

    first, second, other = asyncio.run(run())
    assert sorted([first.status_code, second.status_code]) == [200, 400]  # one of a's two, never both
    refused = first if first.status_code == 400 else second
    assert refused.json()["error"]["code"] == "duplicate_request_id"
    assert other.status_code == 200 and other.json()["meta_info"]["id"] == "shared-id"  # b's id is b's own


def test_the_admin_namespace_is_a_reserved_tenant_name(tmp_path: Any) -> None:
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("k1 alice\nk2 admin\n")
    with pytest.raises(ValueError, match="'admin' is reserved"):
        read_keys_file(keys_file)
    with pytest.raises(ValueError, match="reserved"):
        Authenticator({"k2": "admin"}, {ADMIN})
    assert Authenticator({"k1": "alice"}, {ADMIN}).identify(f"Bearer {ADMIN}").tenant == "admin"


def test_statistics_rows_and_metric_labels_are_capped_per_tenant() -> None:
    rows = PromptStatsRecorder(max_templates=3)
    for i in range(10):
        rows.record("noisy", RequestTags(template=f"t{i}"), 10, 0, 0)
    rows.record("quiet", RequestTags(template="quiet-bot"), 10, 5, 0)
    assert [r["template"] for r in rows.snapshot("quiet")["templates"]] == ["quiet-bot"]
    assert OTHER in {r["template"] for r in rows.snapshot("noisy")["templates"]}
    metrics = Metrics("tiny", dict, lambda: 0, max_template_labels=3)
    assert [metrics.template_label(f"t{i}", "noisy") for i in range(5)][3:] == [OTHER_TEMPLATE] * 2
    assert metrics.template_label("quiet-bot", "quiet") == "quiet-bot"
