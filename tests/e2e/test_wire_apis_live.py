"""`/v1/messages` and `/v1/responses` on a real `radixgate serve` with an API key: the `anthropic`
client over real HTTP (`x-api-key`), both streams over real sockets, a client that leaves a stream
aborts its engine request (nothing leaks, counted as aborted), and `--response-store-size` bounds
the store of the running server."""

from __future__ import annotations

import time
from collections.abc import Callable

import anthropic
import httpx
import openai
import pytest
import requests

from radixgate.gateway.server_process import ServerProcess

KEY = "wire-live-key"
FLAGS = ["--api-key", KEY, "--admin-api-key", KEY, "--enable-debug-endpoints", "--response-store-size", "2"]


@pytest.fixture
def server(live_server: Callable[..., ServerProcess]) -> ServerProcess:
    return live_server(FLAGS)


def _aborted(server: ServerProcess, endpoint: str) -> float:
    text = requests.get(f"{server.base_url}/metrics", headers={"x-api-key": KEY}, timeout=30).text
    for line in text.splitlines():
        if line.startswith("radixgate:requests_total{") and f'endpoint="{endpoint}"' in line and "aborted" in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _idle(server: ServerProcess) -> None:
    deadline = time.monotonic() + 30
    while True:
        info = requests.get(f"{server.base_url}/server_info", headers={"x-api-key": KEY}, timeout=30).json()
        if info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0:
            break
        assert time.monotonic() < deadline, f"engine still busy: {info}"
        time.sleep(0.1)
    check = requests.get(f"{server.base_url}/debug/check_idle_invariant", headers={"x-api-key": KEY}, timeout=30)
    assert check.status_code == 200, check.text


def test_both_apis_over_real_http(server: ServerProcess) -> None:
    claude = anthropic.Anthropic(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=60)
    with claude.messages.stream(
        model="tiny",
        max_tokens=5,
        messages=[{"role": "user", "content": "[live] hello"}],
        extra_body={"temperature": 0},
    ) as stream:
        text = "".join(stream.text_stream)
    assert text and stream.get_final_message().usage.output_tokens == 5
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.base_url, api_key="wrong", max_retries=0).messages.create(
            model="tiny", max_tokens=1, messages=[{"role": "user", "content": "x"}]
        )
    sdk = openai.OpenAI(base_url=server.api_url, api_key=KEY, max_retries=0, timeout=60)
    events = [e.type for e in sdk.responses.create(model="tiny", input="[live] hi", max_output_tokens=3, stream=True)]
    assert events[0] == "response.created" and events[-1] == "response.incomplete"
    made = [sdk.responses.create(model="tiny", input=f"[live] {i}", max_output_tokens=1).id for i in range(3)]
    with pytest.raises(openai.NotFoundError):  # --response-store-size 2: the oldest went
        sdk.responses.retrieve(made[0])
    assert sdk.responses.retrieve(made[2]).id == made[2]


@pytest.mark.parametrize(
    ("path", "body", "endpoint"),
    [
        ("/v1/messages", {"max_tokens": 4000, "messages": [{"role": "user", "content": "[live] long"}]}, "messages"),
        ("/v1/responses", {"max_output_tokens": 4000, "input": "[live] long"}, "responses"),
    ],
)
def test_a_client_leaving_a_stream_aborts_it(server: ServerProcess, path: str, body: dict, endpoint: str) -> None:
    before = _aborted(server, endpoint)
    headers = {"x-api-key": KEY}
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        with http.stream("POST", path, json={"model": "tiny", "stream": True, **body}, headers=headers) as r:
            assert r.status_code == 200
            for num_lines, _ in enumerate(r.iter_lines()):
                if num_lines > 20:  # a few deltas in: leave
                    break
    _idle(server)  # 4000 tokens would take minutes: the request was aborted, its pages freed
    deadline = time.monotonic() + 10
    while _aborted(server, endpoint) < before + 1:
        assert time.monotonic() < deadline, "the abort was not counted"
        time.sleep(0.1)
