"""radixgate on a local Ray cluster (loopback only): two engine replicas behind the gateway ingress,
requests through the `openai` client, a replica killed and restarted by Ray, nothing left behind."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

# Ray on loopback and quiet; read by ray when it is imported, so set before the import below.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
os.environ.update(RAY_ENV)
ray = pytest.importorskip("ray", reason="the ray extra (radixgate[ray]) is not installed")

pytestmark = pytest.mark.slow
ADMIN = "ray-admin"
SYSTEM = "You are the support assistant of a hardware store. Answer briefly and cite the aisle. " * 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_processes(temp_dir: Path) -> list[psutil.Process]:
    """Live (not zombie) processes of the Ray session under `temp_dir`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and str(temp_dir) in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _replica_pids() -> list[int]:
    """Live engine-replica processes (Ray names each worker process after its actor)."""
    pids = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            title = " ".join(proc.info["cmdline"] or ())
            if proc.info["status"] != psutil.STATUS_ZOMBIE and title.startswith(
                "ray::ServeReplica:radixgate:EngineReplica"
            ):
                pids.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return pids


def _workers(base: str) -> list[dict]:
    r = httpx.get(f"{base}/workers", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    return r.json()["workers"] if r.status_code == 200 else []


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # No dashboard, a small object store, every address on loopback, Serve's proxy on 127.0.0.1.
    temp_dir = Path("/tmp") / f"rg-ray-{os.getpid()}"
    from ray import serve

    from radixgate.deploy.ray import app

    for attempt in range(2):  # ray gives its raylet a fixed 30 s to start: one retry on a loaded machine
        try:
            ray.init(
                _node_ip_address="127.0.0.1",
                num_cpus=2,
                include_dashboard=False,
                object_store_memory=80 << 20,
                _temp_dir=str(temp_dir),
                logging_level="warning",
                log_to_driver=False,
            )
            break
        except Exception as exc:
            ray.shutdown()
            if attempt or "timed out during startup" not in str(exc):
                raise
    try:
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        args = {
            "num_replicas": 2,
            "num_cpus_per_replica": 0,
            "engine_args": "--max-total-tokens 8192",
            "admin_api_keys": [ADMIN],
            "heartbeat_s": 0.5,
        }
        serve.run(app(args), name="radixgate", route_prefix="/")
        base = f"http://127.0.0.1:{port}"
        _wait(lambda: sum(w["healthy"] for w in _workers(base)) == 2, 240, "two healthy replicas")
        yield base
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
    _wait(lambda: not _ray_processes(temp_dir), 30, "Ray's processes to exit")


def test_replicas_serve_cache_hits_and_survive_a_killed_replica(cluster: str) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{cluster}/v1", api_key=ADMIN, max_retries=0, timeout=120)

    def ask(question: str) -> openai.types.chat.ChatCompletion:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        return client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, temperature=0)

    replies = [ask(f"Where are the hammers, aisle {i}?") for i in range(4)]
    assert all(r.usage.prompt_tokens_details.cached_tokens > 200 for r in replies[1:])
    served = {w["id"]: w["requests"] for w in _workers(cluster)}
    assert sorted(served.values()) == [0, 4], f"one prefix should land on one replica: {served}"

    before = {w["url"] for w in _workers(cluster)}
    pids = _replica_pids()
    assert len(pids) == 2
    os.kill(pids[0], signal.SIGKILL)
    # A request in flight on the replica as it dies fails (it is never retried onto another worker: it
    # might be what killed it); within a health interval the gateway stops routing there, and the other
    # replica keeps serving while Ray restarts the killed one.
    _wait(lambda: sum(w["healthy"] for w in _workers(cluster)) == 1, 30, "the gateway to see the killed replica down")
    for i in range(3):
        assert ask(f"Do you sell nails, shelf {i}?").choices[0].finish_reason in ("stop", "length")
    _wait(lambda: len(_replica_pids()) == 2 and pids[0] not in _replica_pids(), 180, "Ray to restart the replica")
    _wait(
        lambda: sum(w["healthy"] for w in _workers(cluster)) == 2 and {w["url"] for w in _workers(cluster)} != before,
        120,
        "the restarted replica to join the gateway",
    )
    assert ask("And screws?").usage.prompt_tokens > 0
