"""`radixgate bench serving` workloads, ideal hit rates and the runner, against a simulated cache."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from sdk_fakes import FakeServer

import radixgate as rg
from radixgate.bench.serving import TABLE_WORKLOADS, main
from radixgate.bench.serving_runner import prefix_reuse, run_workload
from radixgate.bench.workloads import WORKLOADS, GspParams, build_workload


def test_prefix_stats_counts_shared_prefixes_and_first_misses():
    a, b, c = [1, 2, 3, 4], [1, 2, 3, 5], [9, 9, 9, 9]
    share, ideal = prefix_reuse([a, b, c])
    assert share == pytest.approx(6 / 12) and ideal == pytest.approx(3 / 12)
    assert prefix_reuse([a, b], warm=[[1, 2, 3]])[1] == pytest.approx(6 / 8)
    assert prefix_reuse([a, a])[1] == pytest.approx(3 / 8)  # an engine computes at least one token


@pytest.mark.parametrize("name", WORKLOADS)
def test_workloads_are_deterministic_and_sized(name):
    one = build_workload(name, num_prompts=12, shared_tokens=300, gsp=GspParams(2, 3, 200, 16, 4))
    two = build_workload(name, num_prompts=12, shared_tokens=300, gsp=GspParams(2, 3, 200, 16, 4))
    assert one == two
    assert len(one.requests) == (6 if name == "gsp" else 12)
    for i, request in enumerate(one.requests):
        assert request.depends_on is None or request.depends_on < i


def test_bad_order_has_the_same_content_as_the_prompt_version():
    good, bad = build_workload("chatbot", num_prompts=3), build_workload("chatbot-bad", num_prompts=3)
    good_system = good.requests[0].prompt.messages()[0]["content"]
    assert bad.requests[0].prompt[0]["content"].endswith(good_system)
    assert bad.requests[0].prompt[0]["content"].startswith("Current time: 2026-")


def run(name: str, server: FakeServer, **kwargs) -> rg._bench_runner.BenchResult:
    workload = build_workload(name, num_prompts=10, shared_tokens=400, gsp=GspParams(2, 4, 300, 16, 4))

    async def go():
        http = httpx.AsyncClient(transport=httpx.MockTransport(server.handler))
        async with rg.AsyncClient(base_url="http://fake/v1", model="m", http_client=http) as client:
            return await run_workload(client, workload, max_concurrency=3, **kwargs)

    return asyncio.run(go())


@pytest.mark.parametrize("name", ["chatbot", "rag", "few-shot", "agent", "gsp"])
def test_measured_hit_rate_matches_ideal_on_a_perfect_cache(name):
    result = run(name, FakeServer())
    assert result.completed == result.num_requests and result.failed == 0
    assert result.ideal_hit_rate > 0.8
    assert result.measured_hit_rate >= 0.95 * result.ideal_hit_rate
    assert result.ttft_p50_ms > 0 and result.request_throughput > 0


def test_without_cache_nothing_hits_and_unique_allows_nothing():
    assert run("chatbot", FakeServer(cache_enabled=False)).measured_hit_rate == 0
    unique = run("unique", FakeServer())
    assert unique.ideal_hit_rate < 0.02 and unique.shared_prefix_share < 0.02


def test_bad_order_misses_where_prompt_hits():
    bad, good = run("chatbot-bad", FakeServer()), run("chatbot", FakeServer())
    assert bad.measured_hit_rate < 0.05 < 0.9 < good.measured_hit_rate


def test_dependencies_and_warmup_order_requests():
    server = FakeServer()
    run("agent", server, warm=True)
    bodies = server.bodies()
    assert bodies[0]["max_tokens"] == 1 and len(bodies[0]["messages"]) == 1  # warm-up first
    lengths = {}
    for body in bodies[1:]:
        first_user = body["messages"][1]["content"]
        assert len(body["messages"]) > lengths.get(first_user, 0)  # each session's turns arrive in order
        lengths[first_user] = len(body["messages"])


def test_failed_requests_are_counted_not_raised():
    result = run("chatbot", FakeServer(failures=[httpx.Response(400, text="bad")] * 2), warm=False)
    assert result.failed == 2 and result.completed == 8 and "400" in result.errors[0]


def test_cli_reports_connection_failure_with_exit_status_2(capsys):
    status = main(["--base-url", "http://127.0.0.1:9/v1", "--num-prompts", "1", "--max-retries", "0", "--json"])
    assert status == 2
    assert "Could not connect" in capsys.readouterr().err


def test_cli_prints_json_results(capsys):
    server = FakeServer()
    status = main(
        ["--base-url", "http://fake/v1", "--workload", "rag", "--num-prompts", "6", "--json"],
        transport=httpx.MockTransport(server.handler),
    )
    payload = json.loads(capsys.readouterr().out)
    assert status == 0
    (result,) = payload["results"]
    assert result["workload"] == "rag" and result["completed"] == 6
    assert result["measured_hit_rate"] >= 0.95 * result["ideal_hit_rate"] > 0.5
    assert {"ttft_p50_ms", "ttft_p99_ms", "output_throughput", "shared_prefix_share"} <= result.keys()


def test_cli_compare_mode_prints_both_rows(capsys):
    status = main(
        ["--base-url", "http://fake/v1", "--compare-bad-vs-prompt", "--num-prompts", "4"],
        transport=httpx.MockTransport(FakeServer().handler),
    )
    out = capsys.readouterr().out
    assert status == 0 and "chatbot-bad" in out and "bad order vs Prompt" in out


def test_poisson_arrivals_spread_requests_over_time():
    result = run("chatbot", FakeServer(), request_rate=200.0, seed=1)
    assert result.completed == 10 and result.duration_s > 10 / 200 / 4  # ~50 ms of arrivals, not all at once


def test_cli_table_mode_compares_a_cached_and_an_uncached_server(capsys):
    cached, uncached = FakeServer(), FakeServer(cache_enabled=False)

    def route(request: httpx.Request) -> httpx.Response:
        return (cached if request.url.host == "cache" else uncached).handler(request)

    status = main(
        [
            "--table",
            "--base-url",
            "http://cache/v1",
            "--nocache-url",
            "http://nocache/v1",
            "--num-prompts",
            "4",
            "--shared-tokens",
            "200",
            "--json",
        ],
        transport=httpx.MockTransport(route),
    )
    payload = json.loads(capsys.readouterr().out)
    assert status == 0
    assert [r["workload"] for r in payload["results"]] == list(TABLE_WORKLOADS)
    by_name = {r["workload"]: r for r in payload["results"]}
    assert by_name["chatbot"]["measured_hit_rate"] > 0.8 and by_name["unique"]["measured_hit_rate"] < 0.05
    assert all(r["measured_hit_rate"] == 0 for r in payload["no_cache"])
    assert (
        main(
            [
                "--table",
                "--base-url",
                "http://cache/v1",
                "--nocache-url",
                "http://nocache/v1",
                "--num-prompts",
                "2",
                "--shared-tokens",
                "100",
            ],
            transport=httpx.MockTransport(route),
        )
        == 0
    )
    assert "TTFT ratio" in capsys.readouterr().out
