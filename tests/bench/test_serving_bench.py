"""`radixgate bench serving` workloads, ideal hit rates and the runner, against a simulated cache."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from sdk_fakes import FakeServer

import radixgate as rg
from radixgate.bench import serving
from radixgate.bench.serving import TABLE_WORKLOADS, main
from radixgate.bench.serving_runner import prefix_reuse, run_workload
from radixgate.bench.workloads import WORKLOADS, BenchRequest, GspParams, Workload, build_workload


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


def send(workload: Workload, server: FakeServer, **kwargs) -> rg._bench_runner.BenchResult:
    async def go():
        http = httpx.AsyncClient(transport=httpx.MockTransport(server.handler))
        async with rg.AsyncClient(base_url="http://fake/v1", model="m", http_client=http) as client:
            return await run_workload(client, workload, **kwargs)

    return asyncio.run(go())


def run(name: str, server: FakeServer, **kwargs) -> rg._bench_runner.BenchResult:
    workload = build_workload(name, num_prompts=10, shared_tokens=400, gsp=GspParams(2, 4, 300, 16, 4))
    return send(workload, server, max_concurrency=3, **kwargs)


@pytest.mark.parametrize("name", ["chatbot", "rag", "few-shot", "agent", "gsp"])
def test_every_workload_runs_to_completion_and_shares_most_of_its_tokens(name):
    result = run(name, FakeServer())
    expected = 8 if name == "gsp" else 10  # gsp: 2 groups of 4
    assert result.num_requests == result.completed == expected and result.failed == 0
    assert result.ideal_hit_rate > 0.8  # the workload's content: long shared parts, short questions
    assert result.ttft_p50_ms > 0 and result.request_throughput > 0


SUMS = ("prompt_tokens", "cached_tokens", "measured_hit_rate", "ideal_hit_rate", "shared_prefix_share")

# One word = one cl100k token in these prompts (red, " green", " blue", " one", ...); each request
# waits for the one before it, so the fake sees them in order.
COMPLETIONS = Workload(
    "tiny-completions",
    [
        BenchRequest("red green blue one", api="completion"),
        BenchRequest("red green blue two", api="completion", depends_on=0),
        BenchRequest("red green blue one", api="completion", depends_on=1),
        BenchRequest("cat dog", api="completion", depends_on=2),
    ],
)


def test_completion_run_reports_the_hand_counted_tokens_and_rates():
    result = send(COMPLETIONS, FakeServer(), warm=False)
    # prompt tokens: 4 + 4 + 4 + 2 = 14.
    # cached (the fake's longest earlier prefix, all but the last token at most):
    #   0 (cold) + 3 (red green blue) + min(4, 4 - 1) = 3 (a repeat) + 0 (cat dog) = 6.
    assert (result.prompt_tokens, result.cached_tokens, result.completed) == (14, 6, 4)
    assert result.measured_hit_rate == 6 / 14
    # ideal: the same walk over the prompts' own tokens, 0 + 3 + 3 + 0 = 6 of 14.
    assert result.ideal_hit_rate == 6 / 14
    # shared prefix with any other request (not capped): 4 (= request 2) + 3 + 4 (= request 0) + 0 = 11.
    assert result.shared_prefix_share == 11 / 14
    uncached = send(COMPLETIONS, FakeServer(cache_enabled=False), warm=False)
    assert (uncached.prompt_tokens, uncached.cached_tokens, uncached.ideal_hit_rate) == (14, 0, 6 / 14)


CHAT = Workload(
    "tiny-chat",
    [
        BenchRequest([{"role": "system", "content": "red green blue"}, {"role": "user", "content": "one"}]),
        BenchRequest(
            [{"role": "system", "content": "red green blue"}, {"role": "user", "content": "two"}], depends_on=0
        ),
    ],
)


def test_chat_run_measures_the_servers_tokens_and_the_ideal_counts_chatml():
    """The measured side is what the server reports (here the fake's template); the ideal is the
    runner's own ChatML count: two different token models, each worked out by hand."""
    result = send(CHAT, FakeServer(), warm=False)
    # The fake's template: per message a role marker, the content, an end marker; then one marker.
    # Each request: [system] red green blue [end] [user] one [end] [end-of-chat] = 1+3+1 + 1+1+1 + 1 = 9.
    # Request 1 shares [system] red green blue [end] [user] with request 0: 6 cached.
    assert (result.prompt_tokens, result.cached_tokens) == (18, 6)
    assert result.measured_hit_rate == 6 / 18
    # ChatML: <|im_start|> "system" "\n" red green blue <|im_end|> "\n"   = 1+5+1+1 = 8
    #         <|im_start|> "user" "\n" one <|im_end|> "\n"                 = 1+3+1+1 = 6
    #         <|im_start|> "assistant" "\n"                                = 1+2     = 3, 17 per request.
    # Request 1 shares the system message (8) and <|im_start|> "user" "\n" (3): 11 of 34.
    assert result.ideal_hit_rate == 11 / 34 and result.shared_prefix_share == 22 / 34


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
    # The CLI reports what the runner measures on the same workload with the CLI's defaults.
    direct = send(build_workload("rag", num_prompts=6, shared_tokens=1200), FakeServer(), max_concurrency=4)
    assert {k: result[k] for k in SUMS} == {k: getattr(direct, k) for k in SUMS}
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
    args = serving._parser().parse_args(["--num-prompts", "4", "--shared-tokens", "200"])
    for name in TABLE_WORKLOADS:  # each row as the runner measures it alone (the table flushes between them)
        direct = send(serving._workload(args, name), FakeServer(), max_concurrency=4)
        assert {k: by_name[name][k] for k in SUMS} == {k: getattr(direct, k) for k in SUMS}, name
    assert by_name["unique"]["cached_tokens"] * 10 < by_name["chatbot"]["cached_tokens"]
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
