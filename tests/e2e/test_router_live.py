"""A front gateway routing to two live `radixgate serve` workers: tenants stay apart through the
router and straight at a worker, a foreign (plain OpenAI) worker is routed and counted, and a worker
killed mid-run fails only its own streams, then rejoins."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from radixgate.gateway.server_process import ServerProcess

pytestmark = pytest.mark.slow
WORKER_KEY = "e2e-worker-key"
DIRECT_KEY = "e2e-direct-key"  # a worker's own tenant key, for a client that goes around the router
ADMIN = "e2e-admin"
WORKER_ARGS = ["--worker-api-key", WORKER_KEY, "--api-key", DIRECT_KEY, "--enable-debug-endpoints"]
WORKER_ARGS += ["--max-total-tokens", "16384"]
ENV = {"RADIXGATE_NUM_THREADS": "1"}


def _prompt(tag: str) -> str:
    return f"<{tag}> " + " ".join(f"Clause {i} of the {tag} policy stays the same." for i in range(50))


# Loaded into the front gateway only (PYTHONPATH): writes the names in its sys.modules to a file, over
# and over, so a test can read what a live routing gateway imported.
MODULES_PROBE = """
import json, os, sys, threading, time

def _write(path):
    while True:
        with open(path + ".tmp", "w") as f:
            json.dump(list(sys.modules), f)
        os.replace(path + ".tmp", path)
        time.sleep(0.1)

if os.environ.get("RADIXGATE_TEST_MODULES_FILE"):
    threading.Thread(target=_write, args=(os.environ["RADIXGATE_TEST_MODULES_FILE"],), daemon=True).start()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    keys = tmp_path_factory.mktemp("router") / "keys.txt"
    keys.write_text("key-a tenant-a\nkey-b tenant-b\n")
    probe = tmp_path_factory.mktemp("probe")
    (probe / "sitecustomize.py").write_text(MODULES_PROBE)
    modules_file = probe / "modules.json"
    path = os.pathsep.join(p for p in (str(probe), os.environ.get("PYTHONPATH", "")) if p)
    front_env = {**ENV, "PYTHONPATH": path, "RADIXGATE_TEST_MODULES_FILE": str(modules_file)}
    workers = [ServerProcess(WORKER_ARGS, env=ENV) for _ in range(2)]
    front = None
    try:
        for w in workers:
            w.__enter__()
        front_args = ["--api-keys-file", str(keys), "--admin-api-key", ADMIN, "--worker-api-key", WORKER_KEY]
        front_args += ["--worker", workers[0].base_url, "--worker", workers[1].base_url]
        front = ServerProcess(front_args, env=front_env).__enter__()
        yield {"front": front, "workers": workers, "modules_file": modules_file}
    finally:
        for server in [front, *workers]:
            if server is not None:
                server.__exit__(None, None, None)


def _complete(base_url: str, key: str | None, prompt: str, **extra) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0, **extra}
    return httpx.post(f"{base_url}/v1/completions", json=body, headers=headers, timeout=120)


def _cached(base_url: str, key: str | None, prompt: str, **extra) -> int:
    r = _complete(base_url, key, prompt, **extra)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def _workers(front: ServerProcess) -> list[dict]:
    r = httpx.get(f"{front.base_url}/workers", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    return r.json()["workers"]


def test_a_routing_gateway_loads_no_torch_and_no_engine_model_code(cluster: dict) -> None:
    """`radixgate serve --worker URL`, live and after serving: no libtorch mapped, no engine model code
    imported (its workers, co-located engines, do map libtorch: the check sees it where it is)."""
    front, worker = cluster["front"], cluster["workers"][0]
    assert _cached(front.base_url, "key-a", "Layering probe: " + _prompt("layering")) == 0
    assert "libtorch" not in Path(f"/proc/{front.process.pid}/maps").read_text()
    assert "libtorch" in Path(f"/proc/{worker.process.pid}/maps").read_text()
    served_at = time.time()
    deadline = time.monotonic() + 30
    while cluster["modules_file"].stat().st_mtime <= served_at:  # a list written after the request
        assert time.monotonic() < deadline, "the front gateway's module probe never wrote"
        time.sleep(0.05)
    modules = set(json.loads(cluster["modules_file"].read_text()))
    assert {"radixgate.gateway.app", "radixgate.gateway.workers.pool", "radixgate.engine.protocol"} <= modules
    assert "torch" not in modules
    engine_code = ("radixgate.engine.engine", "radixgate.engine.models", "radixgate.engine.runner")
    assert sorted(m for m in modules if m.startswith(engine_code)) == []


def test_tenants_stay_apart_through_the_router_and_at_a_worker(cluster: dict) -> None:
    front, workers = cluster["front"].base_url, [w.base_url for w in cluster["workers"]]
    prompt = _prompt("tenants")
    for key in ("key-a", "key-b"):  # shuffled, an earlier test's prompt under the same salt shares its first token
        assert httpx.post(f"{front}/flush_cache", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert _cached(front, "key-a", prompt + " 1") == 0
    assert _cached(front, "key-a", prompt + " 2") > 300
    assert _cached(front, "key-b", prompt + " 2") == 0  # zero served hits across tenants
    assert _cached(front, "key-b", prompt + " 3") > 300
    for url in workers:  # a client that goes straight to a worker and names tenant-a's salt
        assert _complete(url, None, prompt).status_code == 401
        r = httpx.post(
            f"{url}/v1/completions",
            json={"model": "tiny", "prompt": prompt, "max_tokens": 1},
            headers={"Authorization": f"Bearer {DIRECT_KEY}", "X-Radixgate-Cache-Salt": "tenant:tenant-a"},
            timeout=60,
        )
        assert r.status_code == 403
        assert _cached(url, DIRECT_KEY, prompt + " 4", cache_salt="tenant:tenant-a") == 0  # a body salt is ignored
    assert httpx.post(f"{front}/flush_cache", headers={"Authorization": "Bearer key-a"}).status_code == 200
    assert _cached(front, "key-a", prompt + " 5") == 0
    assert _cached(front, "key-b", prompt + " 5") > 300  # tenant-a's flush left tenant-b's tokens in place


def test_a_foreign_worker_is_routed_and_counted(cluster: dict) -> None:
    """A front gateway (in-process: only its tokenizer loads) using a live worker as a plain OpenAI server."""
    from fastapi.testclient import TestClient

    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig

    url = cluster["workers"][1].base_url
    config = GatewayConfig(workers=(f"openai+{url}",), worker_api_key=WORKER_KEY)
    with TestClient(create_app(config)) as front:
        prompt = _prompt("foreign")
        body = {"model": "tiny", "max_tokens": 1, "temperature": 0, "metadata": {"prompt_template": "foreign-bot"}}
        cached = []
        for suffix in (" 1", " 2"):
            r = front.post("/v1/completions", json={**body, "prompt": prompt + suffix})
            assert r.status_code == 200, r.text
            cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
        assert cached[0] == 0 and cached[1] > 300  # the worker's own count, via usage
        metrics = front.get("/metrics").text
        line = next(m for m in metrics.splitlines() if m.startswith("radixgate:worker_cached_tokens_total"))
        assert "openai+" in line and float(line.split()[-1]) > 300
        rows = front.get("/v1/prompt_stats").json()["templates"]
        row = next(r for r in rows if r["template"] == "foreign-bot")
        assert row["requests"] == 2 and row["cached_tokens"] > 300


def test_the_seed_request_is_a_400_and_both_workers_stay_healthy(cluster: dict) -> None:
    """A seed past torch's range used to kill a worker's engine, then the next one's on the retry."""
    front = cluster["front"].base_url
    for seed in (2**64, -(2**63) - 1):
        r = _complete(front, "key-a", _prompt("seed"), temperature=1.0, seed=seed)
        assert r.status_code == 400 and r.json()["error"]["param"] == "seed", r.text
        for w in cluster["workers"]:  # straight at a worker, its native route
            body = {"text": "seed", "sampling_params": {"max_new_tokens": 1, "temperature": 1.0, "seed": seed}}
            headers = {"Authorization": f"Bearer {DIRECT_KEY}"}
            r = httpx.post(f"{w.base_url}/generate", json=body, headers=headers, timeout=60)
            assert r.status_code == 400 and "seed" in r.json()["error"]["param"], r.text
    assert all(w["healthy"] for w in _workers(cluster["front"])) and httpx.get(f"{front}/health").status_code == 200
    for w in cluster["workers"]:
        assert httpx.get(f"{w.base_url}/health").status_code == 200
    assert _complete(front, "key-a", _prompt("seed"), temperature=1.0, seed=2**64 - 1).status_code == 200


def _stream(base_url: str, prompt: str, out: dict) -> None:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 100, "ignore_eos": True, "stream": True}
    events = out.setdefault("events", [])
    try:
        with httpx.stream(
            "POST", f"{base_url}/v1/completions", json=body, headers={"Authorization": "Bearer key-a"}, timeout=120
        ) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    events.append(json.loads(line[6:]))
    except httpx.HTTPError as exc:
        out["transport_error"] = str(exc)


def test_a_killed_worker_fails_only_its_streams_and_rejoins(cluster: dict) -> None:
    front, victim, survivor = cluster["front"], cluster["workers"][0], cluster["workers"][1]
    outs: list[dict] = [{} for _ in range(4)]
    threads = [threading.Thread(target=_stream, args=(front.base_url, _prompt(f"fault{i}"), outs[i])) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while not all(o.get("events") for o in outs):  # every stream has its first token
        assert time.monotonic() < deadline, "streams did not start"
        time.sleep(0.05)
    in_flight = {w["url"]: w["in_flight"] for w in _workers(front)}
    assert in_flight[victim.base_url] >= 1 and in_flight[survivor.base_url] >= 1, in_flight
    victim.process.kill()
    for t in threads:
        t.join(timeout=90)
        assert not t.is_alive(), "a stream hung after its worker died"
    failed = [o for o in outs if any("error" in e for e in o["events"])]
    finished = [
        o for o in outs if any(c.get("finish_reason") == "length" for e in o["events"] for c in e.get("choices", []))
    ]
    assert len(failed) == in_flight[victim.base_url] and len(finished) == 4 - len(failed)
    assert all("worker" in next(e for e in o["events"] if "error" in e)["error"]["message"] for o in failed)
    for i in range(3):  # everything new goes to the survivor, without a hang
        assert _complete(front.base_url, "key-a", _prompt(f"after{i}")).status_code == 200
    r = httpx.get(f"{survivor.base_url}/debug/check_idle_invariant", headers={"Authorization": f"Bearer {WORKER_KEY}"})
    assert r.status_code == 200, r.text  # nothing leaked on the survivor
    _restart(cluster, 0)  # on its old port: it rejoins, and stays for the module's other tests
    before = next(w for w in _workers(front) if w["url"] == victim.base_url)["requests"]
    for i in range(4):
        assert _complete(front.base_url, "key-b", _prompt(f"rejoin{i}")).status_code == 200
    assert next(w for w in _workers(front) if w["url"] == victim.base_url)["requests"] > before


def _restart(cluster: dict, *indices: int) -> None:
    """Workers `indices` (killed by a test) started again on their ports, side by side, and seen
    healthy by the front: the cluster is as the fixture made it, whatever test runs next."""
    olds = {i: cluster["workers"][i] for i in indices}
    news = {
        i: ServerProcess([*WORKER_ARGS, "--port", str(urlparse(old.base_url).port)], env=ENV) for i, old in olds.items()
    }
    for old in olds.values():
        old.stop()
    threads = [threading.Thread(target=new.start) for new in news.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    for i, new in news.items():
        assert new.base_url == olds[i].base_url, new.log_tail()  # started, on its old port
        cluster["workers"][i] = new  # the fixture's own list: it stops the new ones at the end
    deadline = time.monotonic() + 30
    while not all(w["healthy"] for w in _workers(cluster["front"]) if w["url"] in {n.base_url for n in news.values()}):
        assert time.monotonic() < deadline, "a restarted worker did not rejoin"
        time.sleep(0.2)


def test_with_every_worker_gone_the_front_is_unhealthy(cluster: dict) -> None:
    """Killing both workers leaves none, which /workers shows within a health interval or so and the
    front's /health answers with a 503; both are started again afterwards."""
    front = cluster["front"]
    assert httpx.get(f"{front.base_url}/health").status_code == 200
    for worker in cluster["workers"]:
        worker.process.kill()
    start = time.monotonic()
    while any(w["healthy"] for w in _workers(front)):
        assert time.monotonic() - start < 30, "a killed worker is still reported healthy"
        time.sleep(0.05)
    r = httpx.get(f"{front.base_url}/health", timeout=10)
    assert r.status_code == 503 and "no healthy worker" in r.json()["error"]["message"], r.text
    assert _complete(front.base_url, "key-a", _prompt("none left")).status_code == 503
    _restart(cluster, *range(len(cluster["workers"])))
    assert httpx.get(f"{front.base_url}/health").status_code == 200
