"""A real `radixgate serve` on a loopback port, driven the way users drive it:
the official `openai` package, SGLang-style monitoring lines, 64 concurrent streams with
disconnects, and the dashboard in headless Chromium."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest
import requests
from live_servers import KEYLESS
from prometheus_client.parser import text_string_to_metric_families
from tooling import missing

from radixgate.gateway.server_process import ServerProcess

LONG_SYSTEM = " ".join(f"Rule {i}: answer the customer politely and cite the refund policy." for i in range(80))


@pytest.fixture
def server(live_server: Callable[..., ServerProcess]) -> ServerProcess:
    return live_server(KEYLESS)  # shared with other files: each test sends prompts of its own or flushes


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=60)


def _ids(server: ServerProcess, **body: object) -> list[int]:
    """The server's own tokens for a prompt or for chat messages (its /tokenize)."""
    r = requests.post(f"{server.base_url}/tokenize", json={"model": "tiny", **body}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def _reuse(first: list[int], second: list[int]) -> int:
    """What a prefix cache holding `first` gives `second`: their common prefix, less the last token
    of `second`, which is always recomputed for its logits."""
    common = next(
        (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), min(len(first), len(second))
    )
    return min(common, len(second) - 1)


def test_startup_prints_the_urls(server: ServerProcess) -> None:
    printed = "".join(server.output)
    for suffix in ("/v1", "/metrics", "/dashboard"):
        assert f"{server.base_url}{suffix}" in printed


def test_openai_chat_reports_cached_tokens(server: ServerProcess, client: openai.OpenAI) -> None:
    # A cold cache first: in any order of the tests, the first request finds nothing cached.
    assert requests.post(f"{server.base_url}/flush_cache", json={}, timeout=60).status_code == 200
    usages, prompts = [], []
    for question in ("Where is my order?", "Can I get a refund?"):
        messages = [{"role": "system", "content": "Cached: " + LONG_SYSTEM}, {"role": "user", "content": question}]
        reply = client.chat.completions.create(model="tiny", max_tokens=4, temperature=0, messages=messages)
        assert reply.choices[0].message.role == "assistant"
        assert reply.usage.completion_tokens == 4
        usages.append(reply.usage)
        prompts.append(_ids(server, messages=messages))
    assert [u.prompt_tokens for u in usages] == [len(p) for p in prompts]
    assert usages[0].prompt_tokens_details.cached_tokens == 0
    # The second reuses exactly the shared system turn (up to where the questions differ).
    assert usages[1].prompt_tokens_details.cached_tokens == _reuse(prompts[0], prompts[1]) > 800


def test_openai_chat_stream_with_usage(client: openai.OpenAI) -> None:
    # Its own system prompt, warmed here: the test holds alone and in any order.
    messages = [{"role": "system", "content": "Streaming: " + LONG_SYSTEM}, {"role": "user", "content": "streamed"}]
    warm = client.chat.completions.create(model="tiny", max_tokens=1, temperature=0, messages=messages)
    stream = client.chat.completions.create(
        model="tiny",
        max_tokens=5,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        messages=messages,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].usage.prompt_tokens == warm.usage.prompt_tokens
    # The same prompt again: all of it is cached but the last token, which is recomputed for its logits.
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == warm.usage.prompt_tokens - 1


def test_openai_completions(server: ServerProcess, client: openai.OpenAI) -> None:
    prompt = "Completions share this long prefix. " * 40
    first = client.completions.create(model="tiny", prompt=prompt + "one", max_tokens=3)
    second = client.completions.create(model="tiny", prompt=prompt + "two", max_tokens=3)
    assert first.choices[0].finish_reason == "length"
    reused = _reuse(_ids(server, prompt=prompt + "one"), _ids(server, prompt=prompt + "two"))
    assert second.usage.prompt_tokens_details.cached_tokens == reused > 200  # the 40 shared sentences
    pieces = list(client.completions.create(model="tiny", prompt=prompt + "three", max_tokens=3, stream=True))
    assert "".join(p.choices[0].text for p in pieces if p.choices)
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_openai_errors_are_typed(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", max_tokens=-1, messages=[{"role": "user", "content": "x"}])
    assert "max_tokens" in str(info.value)


def test_sglang_monitoring_lines(server: ServerProcess) -> None:
    stats = requests.get(f"{server.base_url}/get_server_info").json()
    assert isinstance(stats["cache_hit_rate"], float)
    curl = shutil.which("curl")
    if curl:  # the literal line SGLang users run
        import subprocess

        out = subprocess.run(
            f"{curl} -s {server.base_url}/metrics | grep cache", shell=True, check=True, capture_output=True, text=True
        ).stdout
    else:
        lines = requests.get(f"{server.base_url}/metrics").text.splitlines()
        out = "\n".join(line for line in lines if "cache" in line)
    for name in (
        "sglang:cache_hit_rate",
        "radixgate:prefix_cache_hits_total",
        "radixgate:prefix_cache_queries_total",
        "vllm:kv_cache_usage_perc",
    ):
        assert name in out
    families = {f.name for f in text_string_to_metric_families(requests.get(f"{server.base_url}/metrics").text)}
    assert {
        "sglang:cache_hit_rate",
        "sglang:token_usage",
        "vllm:num_requests_waiting",
        "sglang:time_to_first_token_seconds",
    } <= families


async def _one_stream(http: httpx.AsyncClient, index: int, disconnect: bool) -> str:
    body = {
        "model": "tiny",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 400 if disconnect else 12,
        "ignore_eos": disconnect,
        "messages": [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": f"client {index}"}],
    }
    chunks = 0
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            return f"error {response.status_code}"
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return "done"
            event = json.loads(line[len("data: ") :])
            if "error" in event:
                return "error event"
            chunks += 1
            if disconnect and chunks == 4:
                return "disconnected"  # leaving the block closes the connection mid-stream
    return "cut short"


def _metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def test_load_with_disconnects_leaks_nothing(server: ServerProcess) -> None:
    aborted_before = _metric(
        requests.get(f"{server.base_url}/metrics").text, "radixgate:requests_total", endpoint="chat", outcome="aborted"
    )

    async def load() -> list[str]:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60, limits=limits) as http:
            return await asyncio.gather(*(_one_stream(http, i, disconnect=i % 4 == 0) for i in range(64)))

    start = time.monotonic()
    outcomes = asyncio.run(asyncio.wait_for(load(), timeout=120))
    assert outcomes.count("done") == 48, outcomes
    assert outcomes.count("disconnected") == 16, outcomes
    deadline = time.monotonic() + 20  # aborted requests would need minutes to decode 400 tokens each
    while True:
        info = requests.get(f"{server.base_url}/server_info").json()
        if info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0:
            break
        assert time.monotonic() < deadline, f"engine still busy after the load: {info}"
        time.sleep(0.1)
    check = requests.get(f"{server.base_url}/debug/check_idle_invariant")
    assert check.status_code == 200, check.text
    metrics = requests.get(f"{server.base_url}/metrics").text
    aborted = _metric(metrics, "radixgate:requests_total", endpoint="chat", outcome="aborted") - aborted_before
    assert aborted == 16
    print(f"\nload: 64 streams (16 disconnecting) in {time.monotonic() - start:.1f} s")


def test_non_streaming_client_that_leaves_aborts_its_request(server: ServerProcess) -> None:
    metrics_url = f"{server.base_url}/metrics"
    before = _metric(
        requests.get(metrics_url).text, "radixgate:requests_total", endpoint="completions", outcome="aborted"
    )
    body = {"model": "tiny", "prompt": "a long answer, please", "max_tokens": 4000, "ignore_eos": True}
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(f"{server.base_url}/v1/completions", json=body, timeout=1.0)
    deadline = time.monotonic() + 10  # 4000 tokens would take far longer than this
    while (
        _metric(requests.get(metrics_url).text, "radixgate:requests_total", endpoint="completions", outcome="aborted")
        == before
    ):
        assert time.monotonic() < deadline, "the request kept running after its client left"
        time.sleep(0.1)
    # The gateway counts the abort when it sends it; the engine thread frees the request at its next step.
    while requests.get(f"{server.base_url}/server_info").json()["num_running_reqs"] != 0:
        assert time.monotonic() < deadline, "the aborted request still holds its slot in the engine"
        time.sleep(0.1)


def test_dashboard_renders_data_in_chromium(server: ServerProcess, tmp_path: Path) -> None:
    from radixgate.bench.screenshot import MIN_INK, capture, find_chromium, run_workload

    if find_chromium() is None:
        missing("Chromium", "make browser")
    run_workload(server.base_url, rounds=2, pause_s=1.0)
    shot = capture(server.base_url, tmp_path / "dashboard.png")
    assert shot.is_rendered, shot.dom[:2000]
    assert shot.num_table_rows >= 3
    points = shot.chart_points()
    assert set(points) == {"c-hit", "c-usage", "c-ttft", "c-tput"} and all(n > 0 for n in points.values()), points
    assert "app/bot.py:42" in shot.dom and "support-bot" in shot.dom
    assert (shot.summary.width, shot.summary.height) == (1280, 1600)
    assert shot.summary.ink > MIN_INK, shot.summary
    assert os.path.getsize(shot.png) > 20_000
