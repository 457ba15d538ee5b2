"""One prefill/decode pair of real `radixgate serve --disaggregation-mode` workers: behind
`sglang-router launch --pd-disaggregation` (0.3.2) and behind radixgate's own PD router, the
`openai` client gets the answer the decode worker gives alone; a worker SIGKILLed mid-handoff
leaves no client hanging and the survivor's pool accounted for."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import httpx
import openai
import pytest

from radixgate.bench.redis_server import free_port
from radixgate.gateway.server_process import ServerProcess

ENV = {"RADIXGATE_CACHE_SECRET": "pd-live-test-secret-0123456789"}  # keys both roles' KV channel
DEADLINE_S = 120  # generous: catches a hang, never times a result


@pytest.fixture(scope="module")
def pd(live_server: Callable[..., ServerProcess]) -> SimpleNamespace:
    port = free_port()
    common = ["--page-size", "16", "--enable-debug-endpoints"]
    flags = {
        "prefill": ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port), *common],
        "decode": [
            "--disaggregation-mode",
            "decode",
            "--disaggregation-prefill-bootstrap",
            f"127.0.0.1:{port}",
            *common,
        ],
    }
    started: dict[str, ServerProcess] = {}
    threads = [threading.Thread(target=lambda r=r: started.update({r: live_server(flags[r], env=ENV)})) for r in flags]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    return SimpleNamespace(port=port, get=lambda role: live_server(flags[role], env=ENV))


def _info(server: ServerProcess) -> dict:
    return httpx.get(f"{server.base_url}/server_info", timeout=10).json()


def _idle(server: ServerProcess) -> None:
    answer = httpx.get(f"{server.base_url}/debug/check_idle_invariant", timeout=30)
    assert answer.status_code == 200 and answer.json()["ok"], answer.text


def _chat(base_url: str, content: str) -> str:
    client = openai.OpenAI(base_url=base_url, api_key="none", timeout=DEADLINE_S, max_retries=0)
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": content}], max_tokens=8, temperature=0
    )
    return reply.choices[0].message.content or ""


def test_sglang_router_in_front_of_the_pair_answers_the_openai_client(pd):
    prefill, decode = pd.get("prefill"), pd.get("decode")
    port = free_port()
    router = subprocess.Popen(
        [os.path.join(os.path.dirname(os.sys.executable), "sglang-router"), "launch", "--pd-disaggregation"]
        + ["--prefill", prefill.base_url, str(pd.port), "--decode", decode.base_url]
        + ["--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        content = "PD through sglang-router: " + "the same words again " * 30
        expected = _chat(decode.api_url, content)  # the decode worker alone, co-located
        before = _info(decode)["disaggregation"]["num_transfers"]
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                answer = _chat(f"http://127.0.0.1:{port}/v1", content)
                break
            except (openai.APIConnectionError, openai.APIStatusError):  # the router is still starting
                assert time.monotonic() < deadline, "sglang-router never answered"
                time.sleep(0.5)
        assert answer == expected
        assert _info(decode)["disaggregation"]["num_transfers"] == before + 1
        assert _info(prefill)["disaggregation"]["num_transfers"] >= 1
    finally:
        router.terminate()
        router.wait(30)
    _idle(prefill)
    _idle(decode)


def test_radixgate_pd_router_answers_the_openai_client(pd, live_server):
    prefill, decode = pd.get("prefill"), pd.get("decode")
    front = live_server(["--prefill", prefill.base_url, str(pd.port), "--decode", decode.base_url], env=ENV)
    content = "PD through radixgate's router: " + "other words " * 30
    assert _chat(front.api_url, content) == _chat(decode.api_url, content)
    assert _info(front)["num_pd_requests"] >= 1


def _handoff_then_kill(pd, victim: str) -> tuple[dict, dict]:
    """Sends one long request to both roles, SIGKILLs `victim` while the prefill is handing it off,
    and returns what each client got (status or the error it raised)."""
    prefill, decode = pd.get("prefill"), pd.get("decode")
    body = {
        # Each victim's own ids: shuffled, the other kill test's prompt would already be in the
        # prefill's cache, and the handoff could end before it is seen to start.
        "input_ids": [1000 + (i + (0 if victim == "prefill" else 2500)) % 5000 for i in range(4000)],
        "sampling_params": {"max_new_tokens": 4, "temperature": 0},
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": pd.port,
        "bootstrap_room": int(time.time() * 1000),
    }
    results: dict[str, dict] = {}

    def post(role: str, server: ServerProcess) -> None:
        try:
            results[role] = {
                "status": httpx.post(f"{server.base_url}/generate", json=body, timeout=DEADLINE_S).status_code
            }
        except httpx.HTTPError as e:
            results[role] = {"error": type(e).__name__}

    threads = [threading.Thread(target=post, args=args) for args in (("prefill", prefill), ("decode", decode))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLINE_S
    while _info(prefill)["disaggregation"]["num_active"] == 0:  # claimed the room: prefilling or sending
        assert time.monotonic() < deadline and all(t.is_alive() for t in threads), f"no handoff started: {results}"
        time.sleep(0.02)
    server = prefill if victim == "prefill" else decode
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGKILL)
    for t in threads:
        t.join(DEADLINE_S)
        assert not t.is_alive(), "a client hung after a worker was killed"
    return results["prefill"], results["decode"]


def test_sigkill_of_the_prefill_mid_handoff_fails_cleanly_and_the_decode_releases(pd):
    _, decoded = _handoff_then_kill(pd, "prefill")
    assert decoded.get("status") == 503, decoded  # a clean error, not a hang
    _idle(pd.get("decode"))


def test_sigkill_of_the_decode_mid_handoff_fails_cleanly_and_the_prefill_releases(pd):
    prefilled, _ = _handoff_then_kill(pd, "decode")  # the prefill starts afresh: only the killed side restarts
    assert prefilled.get("status") in (503, 200), prefilled
    _idle(pd.get("prefill"))
