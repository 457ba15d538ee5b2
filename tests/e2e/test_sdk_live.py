"""The SDK, the examples and `radixgate bench serving` against a live `radixgate serve`
(the built-in tiny model, a child process on a free 127.0.0.1 port, always terminated)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from live_servers import KEYLESS

import radixgate as rg
from radixgate.bench.serving import main as bench_main
from radixgate.gateway.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
STATIC = rg.system(
    "You answer questions about the shop's return policy. " + "Items can be returned within 30 days. " * 40
)


@pytest.fixture
def server(live_server: Callable[..., ServerProcess]) -> ServerProcess:
    return live_server(KEYLESS)  # shared with other files: each test flushes or uses a template of its own


@pytest.fixture()
def client(server: ServerProcess) -> Iterator[rg.Client]:
    with rg.Client(base_url=server.api_url, timeout=60, max_retries=0) as c:
        c.flush_cache()
        yield c


def test_prompt_requests_hit_and_are_tagged(client: rg.Client):
    base = rg.Prompt(STATIC, template="e2e-returns")
    first = client.chat(base.extend(rg.context("User id: 1"), rg.user("Can I return boots?")), max_tokens=4)
    second = client.chat(base.extend(rg.context("User id: 2"), rg.user("And tents?")), max_tokens=4)
    line = sys._getframe().f_lineno - 1  # the call on the line above
    assert first.usage.prompt_tokens > base.static_tokens() > 300
    assert second.usage.cached_tokens >= base.static_tokens()
    assert second.hit_ratio > 0.9 > first.hit_ratio
    stats = client.prompt_stats().get("e2e-returns")
    assert stats is not None and stats.requests == 2 and stats.distinct_static_prefixes == 1
    assert stats.source.endswith(f"{Path(__file__).name}:{line}")
    assert client.server_info()["cache_hit_rate"] > 0


def test_streaming_reports_usage_and_flush_empties_the_cache(client: rg.Client):
    prompt = rg.Prompt(STATIC, rg.user("Stream please"), template="e2e-stream")
    client.chat(prompt, max_tokens=2)
    with client.chat_stream(prompt, max_tokens=6, temperature=0.0) as stream:
        text = "".join(chunk.text for chunk in stream)
    assert text and stream.usage is not None and stream.usage.completion_tokens == 6
    assert stream.usage.cached_tokens >= prompt.static_tokens()
    client.flush_cache()
    assert client.complete(prompt, max_tokens=2).cached_tokens < 10
    chunks = list(client.complete_stream(prompt, max_tokens=3))
    assert chunks[-1].usage is not None and chunks[-1].usage.cached_tokens >= prompt.static_tokens()


def test_async_fan_out_after_warm_all_hits(server: ServerProcess):
    base = rg.Prompt(STATIC, rg.document("The store in Oslo closes at six. " * 20), template="e2e-fanout")

    async def main() -> list[rg.ChatCompletion]:
        async with rg.AsyncClient(base_url=server.api_url, timeout=60) as client:
            await client.flush_cache()
            await client.warm(base)
            return await asyncio.gather(
                *(client.chat(base.extend(rg.user(f"Question {i}?")), max_tokens=2) for i in range(4))
            )

    for reply in asyncio.run(main()):
        assert reply.usage.cached_tokens >= base.static_tokens()


def test_server_errors_map_to_exceptions(client: rg.Client):
    with pytest.raises(rg.BadRequestError, match="store"):  # a field radixgate does not implement
        client.chat([{"role": "user", "content": "hi"}], max_tokens=1, extra_body={"store": True})
    strict = rg.Client(base_url=client.options.base_url, send_metadata=False, max_retries=0)
    assert strict.chat([{"role": "user", "content": "hi"}], max_tokens=1).usage.prompt_tokens > 0


@pytest.mark.parametrize("script", ["chatbot.py", "rag.py", "few_shot.py", "agent.py", "tree_of_thought.py"])
def test_examples_run(server: ServerProcess, script: str):
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), "--base-url", server.api_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "cached" in done.stdout or "from cache" in done.stdout


def test_bench_serving_measures_the_ideal_hit_rate(server: ServerProcess, capsys: pytest.CaptureFixture[str]):
    args = [
        "--base-url",
        server.api_url,
        "--num-prompts",
        "6",
        "--shared-tokens",
        "400",
        "--max-tokens",
        "2",
        "--json",
    ]
    assert bench_main([*args, "--workload", "agent"]) == 0
    (agent,) = json.loads(capsys.readouterr().out)["results"]
    assert agent["completed"] == 6 and agent["measured_hit_rate"] >= 0.95 * agent["ideal_hit_rate"] > 0.8
    assert bench_main([*args, "--compare-bad-vs-prompt"]) == 0
    bad, good = json.loads(capsys.readouterr().out)["results"]
    assert (bad["workload"], good["workload"]) == ("chatbot-bad", "chatbot")
    assert bad["measured_hit_rate"] < 0.1 and good["measured_hit_rate"] > 0.9
