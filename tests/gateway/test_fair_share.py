"""Tenant fair share at the gateway: on by default, `--disable-tenant-cache-fairness` turns it off;
each tenant's keys-file weight reaches a remote radixgate worker over the worker channel (and only
there: a client sending the weight header is refused), as it reaches a co-located engine."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from in_thread_server import serve_in_thread

from radixgate.gateway.app import create_app
from radixgate.gateway.cli import build_parser, engine_config
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.tenancy.auth import WEIGHT_HEADER
from radixgate.gateway.workers.pool import WorkerPool
from radixgate.gateway.workers.remote import RadixgateWorker

KEYS = {"fair-key-alice": "fair-alice", "fair-key-bob": "fair-bob"}
WORKER_KEY = "fair-worker-key"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_fair_share_is_on_by_default_and_the_disable_flag_turns_it_off(capsys) -> None:
    parse = build_parser().parse_args
    assert engine_config(parse([])).tenant_cache_fairness is True
    assert engine_config(parse(["--tenant-cache-fairness"])).tenant_cache_fairness is True
    assert engine_config(parse(["--disable-tenant-cache-fairness"])).tenant_cache_fairness is False
    with pytest.raises(SystemExit):
        parse(["--tenant-cache-fairness", "--disable-tenant-cache-fairness"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_weight_header_goes_only_with_a_salt_on_the_worker_channel() -> None:
    keyed, open_ = RadixgateWorker("http://w", api_key=WORKER_KEY), RadixgateWorker("http://w")
    assert keyed._headers("tenant:x", 3.0)[WEIGHT_HEADER] == "3.0"
    assert WEIGHT_HEADER not in keyed._headers(None, 3.0)  # no tenant, no weight
    assert WEIGHT_HEADER not in open_._headers("tenant:x", 3.0)  # no worker key: no channel to trust


def test_a_remote_worker_gets_each_tenants_weight(worker) -> None:
    """Front (keys file weights: alice 3) -> radixgate worker (the worker key): the worker's engine
    counts alice at weight 3 in its fair shares, bob at the default 1."""
    back = create_app(GatewayConfig(worker_api_key=WORKER_KEY), worker=worker)
    pool = WorkerPool(worker.tokenizer, "tiny", worker_api_key=WORKER_KEY, health_check_interval_s=0.2)
    config = GatewayConfig(api_keys=KEYS, tenant_weights={"fair-alice": 3.0}, worker_api_key=WORKER_KEY)
    weights = worker.engine.cache_manager.shares.weights
    try:
        with serve_in_thread(back, "worker") as url, TestClient(create_app(config, worker=pool)) as front:
            member = pool.add_remote(url)
            deadline = time.monotonic() + 30
            while not member.is_healthy:
                assert time.monotonic() < deadline, "the worker never became healthy"
                time.sleep(0.05)
            for key in KEYS:
                body = {"text": f"fair share weights {key}", "sampling_params": {"max_new_tokens": 1}}
                r = front.post("/generate", json=body, headers=_auth(key))
                assert r.status_code == 200, r.text
            assert member.num_requests == 2
            assert weights["tenant:fair-alice"] == 3.0 and "tenant:fair-bob" not in weights
    finally:
        weights.pop("tenant:fair-alice", None)


def test_only_the_worker_channel_may_name_a_weight(make_client) -> None:
    client = make_client(api_keys=KEYS, worker_api_key=WORKER_KEY)
    body = {"text": "fair share weight header", "sampling_params": {"max_new_tokens": 1}}
    r = client.post("/generate", json=body, headers={**_auth("fair-key-alice"), WEIGHT_HEADER: "100"})
    assert r.status_code == 403 and f"drop the '{WEIGHT_HEADER}' header" in r.json()["error"]["message"]
    bad = {**_auth(WORKER_KEY), "x-radixgate-cache-salt": "tenant:fair-alice", WEIGHT_HEADER: "0"}
    r = client.post("/generate", json=body, headers=bad)
    assert r.status_code == 400 and WEIGHT_HEADER in r.json()["error"]["message"]
