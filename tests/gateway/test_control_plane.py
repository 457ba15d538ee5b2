"""The control plane and the keys: a keyless server answers only loopback names and no cross-site
state change; `POST /workers` adds allowed hosts only and sends the worker key only to a worker that
proved it holds it; SIGHUP reloads the keys; secrets come from files and the environment."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from radixgate.gateway.api.routes_admin import worker_proof
from radixgate.gateway.app import create_app
from radixgate.gateway.cli import build_parser, gateway_config
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.tenancy.auth import Authenticator
from radixgate.gateway.tenancy.secrets import install_key_reload
from radixgate.gateway.workers.pool import WorkerPool
from radixgate.gateway.workers.worker import LocalWorker

WORKER_KEY = "worker-key-0123456789"
ADMIN = "admin-key"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_keyless_server_answers_loopback_names_only(make_client: Callable[..., TestClient]) -> None:
    config = gateway_config(build_parser().parse_args([]), None)  # what `radixgate serve` runs with
    client = make_client(allowed_hosts=config.allowed_hosts)
    refused = client.get("/server_info", headers={"Host": "attacker.example:30000"})  # a rebound name
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "host_not_allowed"
    for host in ("127.0.0.1:30000", "localhost", "[::1]:30000"):
        assert client.get("/health", headers={"Host": host}).status_code == 200
    local = {"Host": "127.0.0.1:30000"}
    cross = client.post("/flush_cache", headers={**local, "Origin": "http://attacker.example"})
    assert cross.status_code == 403 and cross.json()["error"]["code"] == "csrf"
    form = client.post("/flush_cache", headers={**local, "Content-Type": "text/plain"}, content=b"x")
    assert form.status_code == 415 and "application/json" in form.json()["error"]["message"]
    assert (
        client.post("/flush_cache", headers={**local, "Origin": "http://127.0.0.1:30000"}, json={}).status_code == 200
    )
    keyed = make_client(api_keys={"key-a": "a"}, allowed_hosts=config.allowed_hosts)  # keys: any name
    assert keyed.get("/server_info", headers={**_auth("key-a"), "Host": "gateway.example"}).status_code == 200


class _Listener(ThreadingHTTPServer):
    """A stand-in for whatever an admin's URL points at: records every Authorization header it gets,
    and answers the key challenge only when it knows the key."""

    def __init__(self, knows_key: bool) -> None:
        self.knows_key = knows_key
        self.authorizations: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Listener

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.authorizations.append(self.headers.get("Authorization", ""))
        self._answer(200, {"status": "ok", "cache_hit_rate": 0.0, "token_usage": 0.0, "max_total_num_tokens": 64})

    def do_POST(self) -> None:
        self.server.authorizations.append(self.headers.get("Authorization", ""))
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/worker_proof" and self.server.knows_key:
            return self._answer(200, {"proof": worker_proof(WORKER_KEY, body["nonce"])})
        self._answer(404, {"error": {"message": "no such route"}})

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def listener(request: pytest.FixtureRequest) -> Iterator[_Listener]:
    server = _Listener(knows_key=request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def router(worker: LocalWorker) -> Iterator[TestClient]:
    pool = WorkerPool(worker.tokenizer, "tiny", worker_api_key=WORKER_KEY, health_check_interval_s=30)
    pool.add_local(worker)
    config = GatewayConfig(admin_api_keys=frozenset({ADMIN}), worker_api_key=WORKER_KEY)
    with TestClient(create_app(config, worker=pool)) as client:
        yield client


@pytest.mark.parametrize("listener", [False], indirect=True)
def test_post_workers_never_sends_the_key_to_a_listener_without_it(router: TestClient, listener: _Listener) -> None:
    response = router.post("/workers", headers=_auth(ADMIN), json={"url": listener.url})
    assert response.status_code == 400 and response.json()["error"]["code"] == "worker_key_unproven"
    assert listener.authorizations and all(WORKER_KEY not in a for a in listener.authorizations)
    assert len(router.get("/workers", headers=_auth(ADMIN)).json()["workers"]) == 1  # not added


@pytest.mark.parametrize("listener", [True], indirect=True)
def test_post_workers_adds_a_worker_that_proved_it_holds_the_key(router: TestClient, listener: _Listener) -> None:
    response = router.post("/workers", headers=_auth(ADMIN), json={"url": listener.url})
    assert response.status_code == 201, response.text
    assert listener.authorizations[0] == ""  # the challenge itself carries no key
    assert f"Bearer {WORKER_KEY}" in listener.authorizations[1:]  # the health check, after the proof


def test_post_workers_refuses_hosts_outside_the_allowlist(router: TestClient) -> None:
    for url in ("http://10.0.0.7:30000", "http://169.254.169.254", "http://worker.attacker.example:30000"):
        response = router.post("/workers", headers=_auth(ADMIN), json={"url": url})
        assert response.status_code == 403 and response.json()["error"]["code"] == "worker_not_allowed", url
        assert "--worker-allowlist" in response.json()["error"]["message"]
    args = build_parser().parse_args(["--worker-allowlist", "10.0.0.0/8", "--worker-allowlist", "gpu-1"])
    assert gateway_config(args, None).worker_allowlist == ("10.0.0.0/8", "gpu-1")


def test_the_worker_proof_is_the_keys_hmac(make_client: Callable[..., TestClient]) -> None:
    worker_side = make_client(worker_api_key=WORKER_KEY)
    nonce = "ab" * 16
    answer = worker_side.post("/worker_proof", json={"nonce": nonce})  # public: no key sent
    assert answer.status_code == 200 and answer.json() == {"proof": worker_proof(WORKER_KEY, nonce)}
    assert WORKER_KEY not in answer.text
    assert make_client().post("/worker_proof", json={"nonce": nonce}).status_code == 404  # no key to prove


def test_sighup_reloads_the_keys_file_and_keeps_serving(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("old-key alice\n")
    args = build_parser().parse_args(["--api-keys-file", str(keys_file)])
    keys, admins = gateway_config(args, None).api_keys, gateway_config(args, None).admin_api_keys
    auth = Authenticator(keys, admins)
    previous = signal.getsignal(signal.SIGHUP)
    try:
        install_key_reload(args, auth)
        keys_file.write_text("new-key bob\nnew-admin ops admin\n")
        os.kill(os.getpid(), signal.SIGHUP)  # the handler runs in this (the main) thread
        assert auth.identify("Bearer new-key").tenant == "bob"
        assert auth.identify("Bearer new-admin").is_admin
        with pytest.raises(Exception, match="incorrect API key"):
            auth.identify("Bearer old-key")
        keys_file.write_text("bad-key admin\n")  # a reserved name: refused, the keys stay as they were
        os.kill(os.getpid(), signal.SIGHUP)
        assert auth.identify("Bearer new-key").tenant == "bob"
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_secrets_come_from_files_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "admin").write_text("# ops\nadmin-from-file\n")
    (tmp_path / "worker").write_text("worker-from-file\n")
    args = build_parser().parse_args(
        ["--admin-api-key-file", str(tmp_path / "admin"), "--worker-api-key-file", str(tmp_path / "worker")]
    )
    config = gateway_config(args, None)
    assert config.admin_api_keys == {"admin-from-file"} and config.worker_api_key == "worker-from-file"
    monkeypatch.setenv("RADIXGATE_ADMIN_API_KEY", "admin-from-env")
    monkeypatch.setenv("RADIXGATE_WORKER_API_KEY", "worker-from-env")
    monkeypatch.setenv("RADIXGATE_API_KEY", "tenant-from-env")
    from_env = gateway_config(build_parser().parse_args([]), None)
    assert from_env.admin_api_keys == {"admin-from-env"} and from_env.worker_api_key == "worker-from-env"
    assert from_env.api_keys == {"tenant-from-env": "default"}
