"""One prefill/decode pair of real `radixgate serve --disaggregation-mode` workers: behind
`sglang-router launch --pd-disaggregation` (0.3.2) and behind radixgate's own PD router, the
`openai` client gets the answer the decode worker gives alone; a worker SIGKILLed mid-handoff
leaves no client hanging and the survivor's pool accounted for; a prefill worker that refuses a
request (its queue full) is replaced by the other."""

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
from prometheus_client.parser import text_string_to_metric_families

from radixgate.bench.redis_server import free_port
from radixgate.gateway.server_process import ServerProcess

ENV = {"RADIXGATE_CACHE_SECRET": "pd-live-test-secret-0123456789"}  # keys both roles' KV channel
DEADLINE_S = 120  # generous: catches a hang, never times a result


@pytest.fixture(scope="module")
def pd(live_server: Callable[..., ServerProcess]) -> SimpleNamespace:
    """Two prefill workers and one decode worker, all publishing KV events."""
    ports = {"prefill": free_port(), "prefill2": free_port()}
    common = ["--page-size", "16", "--enable-debug-endpoints", "--enable-kv-events"]
    # Fixed HTTP ports: a killed worker comes back where the PD router (the same server) looks for it.
    urls = {role: f"http://127.0.0.1:{free_port()}" for role in [*ports, "decode"]}
    flags = {
        role: ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port), *common]
        for role, port in ports.items()
    }
    allowed = [arg for port in ports.values() for arg in ("--disaggregation-prefill-bootstrap", f"127.0.0.1:{port}")]
    flags["decode"] = ["--disaggregation-mode", "decode", *allowed, *common]
    flags["prefill2"] += ["--max-queued-requests", "1"]  # one request waiting fills it: it refuses the next
    for role, url in urls.items():
        flags[role] += ["--port", url.rsplit(":", 1)[1]]

    def get(role: str) -> ServerProcess:
        server = live_server(flags[role], env=ENV)
        assert server.base_url == urls[role]
        return server

    threads = [threading.Thread(target=get, args=(role,)) for role in flags]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)

    def front(*roles: str) -> ServerProcess:
        """radixgate's PD router over the three, once the workers `roles` run (a killed one is
        started again) and it sees them healthy and in sync; the others may be down."""
        needed = {get(role).base_url for role in roles}
        prefills = [arg for role in ports for arg in ("--prefill", urls[role], str(ports[role]))]
        server = live_server([*prefills, "--decode", urls["decode"]], env=ENV)
        deadline = time.monotonic() + DEADLINE_S
        while not all(w["healthy"] and w["kv_index_synced"] for w in _workers(server) if w["url"] in needed):
            assert time.monotonic() < deadline, f"the PD router never saw its workers ready: {_workers(server)}"
            time.sleep(0.1)
        return server

    return SimpleNamespace(port=ports["prefill"], ports=ports, get=get, front=front)


def _workers(front: ServerProcess) -> list[dict]:
    info = _info(front)
    return info["workers"] + info["prefill_workers"]


def _worker(front: ServerProcess, server: ServerProcess) -> dict:
    return next(w for w in _workers(front) if w["url"] == server.base_url)


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


def test_radixgate_pd_router_answers_the_openai_client(pd):
    front, decode = pd.front("prefill", "decode"), pd.get("decode")
    content = "PD through radixgate's router: " + "other words " * 30
    assert _chat(front.api_url, content) == _chat(decode.api_url, content)
    assert _info(front)["num_pd_requests"] >= 1


def _generate(server: ServerProcess, ids: list[int], tokens: int = 4) -> dict:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": tokens, "temperature": 0}}
    answer = httpx.post(f"{server.base_url}/generate", json=body, timeout=DEADLINE_S)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_prefill_killed_mid_handoff_is_retried_on_the_other_before_the_first_token(pd):
    front, decode = pd.front("prefill", "prefill2", "decode"), pd.get("decode")
    prefills = {role: pd.get(role) for role in pd.ports}
    retries = _info(front)["num_prefill_retries"]
    ids = [7000 + (i * 7) % 9000 for i in range(4000)]  # this test's own: in no prefill's cache
    answer: dict = {}
    client = threading.Thread(target=lambda: answer.update(_generate(front, ids)))
    client.start()
    deadline = time.monotonic() + DEADLINE_S
    victim = None
    while victim is None:  # the prefill worker that claimed the room: prefilling or sending
        victim = next((s for s in prefills.values() if _info(s)["disaggregation"]["num_active"]), None)
        assert time.monotonic() < deadline and client.is_alive(), f"no handoff started: {answer}"
        time.sleep(0.02)
    assert victim.process is not None
    os.kill(victim.process.pid, signal.SIGKILL)
    client.join(DEADLINE_S)
    assert not client.is_alive(), "the client hung after its prefill worker was killed"
    assert answer["output_ids"] == _generate(decode, ids)["output_ids"]  # the full answer, from the other
    assert _info(front)["num_prefill_retries"] == retries + 1
    _idle(decode)


def test_kv_events_of_both_roles_reach_the_pd_router_and_route_a_repeat(pd):
    front, decode, holder = pd.front("prefill2", "decode"), pd.get("decode"), pd.get("prefill2")
    prefix = [3000 + (i * 11) % 9000 for i in range(1024)]
    _generate(holder, prefix, 1)  # straight to one prefill worker: only its KV events tell the router
    deadline = time.monotonic() + DEADLINE_S
    while _worker(front, holder)["kv_index_blocks"] < len(prefix) // 16:
        assert time.monotonic() < deadline, "the router never learned the prefill worker's blocks"
        time.sleep(0.05)
    before = {w["url"]: w for w in _workers(front)}
    decode_blocks = _worker(front, decode)["kv_index_blocks"]
    repeat = [*prefix, *range(500, 564)]
    assert _generate(front, repeat)["meta_info"]["cached_tokens"] >= len(prefix)  # the holder's cache served it
    after = _worker(front, holder)
    assert after["requests"] == before[holder.base_url]["requests"] + 1
    assert after["exact_routes"] == before[holder.base_url]["exact_routes"] + 1  # chosen from its KV events
    while _worker(front, decode)["kv_index_blocks"] < decode_blocks + len(repeat) // 16:
        assert time.monotonic() < deadline, "the router never learned the pages the decode worker received"
        time.sleep(0.05)


def test_a_prefill_refusing_the_request_is_replaced_and_the_decode_side_released(pd):
    """prefill2 holds the prompt's prefix, so the router sends the request there first; its one
    queue place (`--max-queued-requests 1`) is taken by a request waiting for a room no decode
    worker registers, so it answers 503 before taking the request. The router closes the decode
    side's stream itself and serves the request through the other prefill worker."""
    front, decode, full = pd.front("prefill", "prefill2", "decode"), pd.get("decode"), pd.get("prefill2")
    prefix = [5000 + (i * 13) % 9000 for i in range(1024)]  # this test's own: in no other prefill's cache
    _generate(full, prefix, 1)
    deadline = time.monotonic() + DEADLINE_S
    while _worker(front, full)["kv_index_blocks"] < len(prefix) // 16:
        assert time.monotonic() < deadline, "the router never learned prefill2's blocks"
        time.sleep(0.05)
    retries, refused = _info(front)["num_prefill_retries"], _rejected(full)
    waiting = {"input_ids": [11, 12, 13], "stream": True, "sampling_params": {"max_new_tokens": 1}}
    waiting |= {"bootstrap_host": "127.0.0.1", "bootstrap_port": pd.ports["prefill2"], "bootstrap_room": 77}
    ids = [*prefix, *range(600, 664)]
    with httpx.Client(timeout=DEADLINE_S) as client, client.stream("POST", f"{full.base_url}/generate", json=waiting):
        while _info(full)["disaggregation"]["num_waiting"] == 0:  # queued: the only place taken
            assert time.monotonic() < deadline, "the filler never queued"
            time.sleep(0.02)
        answer = _generate(front, ids)
        assert _rejected(full) == refused + 1  # prefill2 refused it (queue_full) ...
        assert _info(front)["num_prefill_retries"] == retries + 1  # ... and the other prefilled it
    assert answer["output_ids"] == _generate(decode, ids)["output_ids"]
    assert "requests waiting (limit 1)" in _worker(front, full)["last_error"]
    _idle(decode)
    while _info(full)["disaggregation"]["num_waiting"]:  # the filler's client left: the room is dropped
        assert time.monotonic() < deadline, "prefill2 still waits for the filler's room"
        time.sleep(0.02)
    _idle(full)


def _rejected(server: ServerProcess) -> float:
    """The queue-full refusals `server` counted (its own metric)."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "radixgate:rejected_requests_total" and s.labels.get("reason") == "queue_full":
                return s.value
    return 0.0


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
