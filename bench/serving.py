"""`radixgate bench serving`: a load generator for any OpenAI-compatible server, like SGLang's
bench_serving, that also reports how much of the prompt the prefix cache served.

    radixgate bench serving --workload chatbot --num-prompts 32 --max-concurrency 4
    radixgate bench serving --workload gsp --gsp-num-groups 4 --gsp-prompts-per-group 8 --json
    radixgate bench serving --compare-bad-vs-prompt --launch-server   # same content, bad order vs Prompt
    radixgate bench serving --table                                   # every workload, cache vs no cache

``--table`` starts ``radixgate serve`` twice, one after the other (with and without
``--disable-radix-cache``), unless ``--nocache-url`` names a running server to compare against.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from radixgate._async_client import AsyncClient
from radixgate._base_client import DEFAULT_BASE_URL
from radixgate._exceptions import APIError
from radixgate.gateway.server_process import ServerProcess

from .serving_runner import BenchResult, run_workload
from .workloads import WORKLOADS, GspParams, Workload, build_workload

__all__ = ["main", "TABLE_WORKLOADS"]

TABLE_WORKLOADS = ("chatbot", "rag", "few-shot", "agent", "tree-of-thought", "unique", "gsp")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="radixgate bench serving",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", default=DEFAULT_BASE_URL, help="OpenAI-compatible /v1 root (default: %(default)s)")
    p.add_argument("--api-key", default=None)
    p.add_argument("--model", default=None, help="model name (default: the first /v1/models lists)")
    p.add_argument("--workload", choices=WORKLOADS, default="chatbot")
    p.add_argument("--num-prompts", type=int, default=None, help="requests per workload (default: 32; 12 with --table)")
    p.add_argument("--shared-tokens", type=int, default=1200, help="length of each workload's shared part")
    p.add_argument("--max-tokens", type=int, default=8, help="output tokens per request")
    p.add_argument("--request-rate", type=float, default=float("inf"), help="Poisson arrivals per second")
    p.add_argument("--max-concurrency", type=int, default=4, help="requests in flight at most (0: unlimited)")
    p.add_argument("--no-warm", dest="warm", action="store_false", help="skip warm() of shared prefixes")
    p.add_argument("--no-flush", dest="flush", action="store_false", help="keep the server's cache from before")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--max-retries", type=int, default=2, help="retries per request on connection errors, 429, 5xx")
    gsp = p.add_argument_group("gsp (SGLang's generated-shared-prefix workload)")
    gsp.add_argument("--gsp-num-groups", type=int, default=GspParams.num_groups)
    gsp.add_argument("--gsp-prompts-per-group", type=int, default=None, help="default: num-prompts / groups")
    gsp.add_argument("--gsp-system-prompt-len", type=int, default=None, help="default: --shared-tokens")
    gsp.add_argument("--gsp-question-len", type=int, default=GspParams.question_len)
    gsp.add_argument("--gsp-output-len", type=int, default=GspParams.output_len)
    modes = p.add_argument_group("modes")
    modes.add_argument(
        "--compare-bad-vs-prompt",
        action="store_true",
        help="run chatbot's content written the bad way (timestamp and user id first) and via Prompt",
    )
    modes.add_argument(
        "--table",
        action="store_true",
        help="run every workload with and without the radix cache; print the workload table",
    )
    modes.add_argument("--nocache-url", default=None, help="with --table: a running server with the cache disabled")
    modes.add_argument("--launch-server", action="store_true", help="start `radixgate serve` for the run")
    modes.add_argument("--server-args", default="", help="extra arguments for launched servers")
    p.add_argument("--json", action="store_true", help="print results as JSON instead of a table")
    return p


def _workload(args: argparse.Namespace, name: str) -> Workload:
    gsp = GspParams(
        args.gsp_num_groups,
        args.gsp_prompts_per_group or max(1, args.num_prompts // args.gsp_num_groups),
        args.gsp_system_prompt_len or args.shared_tokens,
        args.gsp_question_len,
        args.gsp_output_len,
    )
    return build_workload(name, num_prompts=args.num_prompts, shared_tokens=args.shared_tokens, seed=args.seed, gsp=gsp)


async def _run(
    args: argparse.Namespace,
    base_url: str,
    names: Sequence[str],
    progress: Progress,
    transport: httpx.AsyncBaseTransport | None,
) -> list[BenchResult]:
    results = []
    http = httpx.AsyncClient(transport=transport, timeout=args.timeout)
    async with (
        http,
        AsyncClient(
            base_url=base_url,
            api_key=args.api_key,
            model=args.model,
            timeout=args.timeout,
            max_retries=args.max_retries,
            http_client=http,
        ) as client,
    ):
        for name in names:
            workload = _workload(args, name)
            if args.flush:
                with contextlib.suppress(APIError):  # servers without /flush_cache (OpenAI) start as they are
                    await client.flush_cache()
            task = progress.add_task(f"{name} @ {base_url}", total=len(workload.requests))
            max_tokens = args.gsp_output_len if name == "gsp" else args.max_tokens
            results.append(
                await run_workload(
                    client,
                    workload,
                    max_tokens=max_tokens,
                    max_concurrency=args.max_concurrency or None,
                    request_rate=args.request_rate,
                    warm=args.warm,
                    seed=args.seed,
                    on_done=lambda task=task: progress.advance(task),
                )
            )
    return results


@contextlib.contextmanager
def _server(args: argparse.Namespace, *, disable_radix_cache: bool = False) -> Iterator[str]:
    """The base URL to benchmark: a launched local server, or --base-url."""
    if not (args.launch_server or (args.table and not args.nocache_url)):
        yield args.base_url
        return
    server_args = args.server_args.split() + (["--disable-radix-cache"] if disable_radix_cache else [])
    with ServerProcess(server_args) as server:
        yield server.api_url


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _results_table(results: Sequence[BenchResult], title: str) -> Table:
    table = Table(title=title)
    for column in (
        "workload",
        "ok/reqs",
        "shared prefix",
        "ideal hit",
        "measured hit",
        "measured/ideal",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "in tok/s",
        "out tok/s",
    ):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for r in results:
        table.add_row(
            r.workload,
            f"{r.completed}/{r.num_requests}",
            _pct(r.shared_prefix_share),
            _pct(r.ideal_hit_rate),
            _pct(r.measured_hit_rate),
            _pct(r.hit_rate_vs_ideal),
            f"{r.ttft_p50_ms:.0f}",
            f"{r.ttft_p99_ms:.0f}",
            f"{r.input_throughput:.0f}",
            f"{r.output_throughput:.1f}",
        )
    return table


def _workload_table(cached: Sequence[BenchResult], uncached: Sequence[BenchResult]) -> Table:
    table = Table(title="Prefix caching by workload (radix cache vs --disable-radix-cache)")
    for column in (
        "workload",
        "shared prefix",
        "ideal hit",
        "measured hit",
        "measured/ideal",
        "TTFT p50 cache",
        "TTFT p50 no cache",
        "TTFT ratio",
    ):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for c, u in zip(cached, uncached, strict=False):
        ratio = c.ttft_p50_ms / u.ttft_p50_ms if u.ttft_p50_ms else float("nan")
        table.add_row(
            c.workload,
            _pct(c.shared_prefix_share),
            _pct(c.ideal_hit_rate),
            _pct(c.measured_hit_rate),
            _pct(c.hit_rate_vs_ideal),
            f"{c.ttft_p50_ms:.0f} ms",
            f"{u.ttft_p50_ms:.0f} ms",
            f"{ratio:.2f}x",
        )
    return table


def _report_errors(console: Console, results: Sequence[BenchResult]) -> None:
    for r in results:
        for error in r.errors:
            console.print(f"[red]{r.workload}: {error}[/red]")


def main(argv: list[str] | None = None, *, transport: httpx.AsyncBaseTransport | None = None) -> int:
    """Entry point of ``radixgate bench serving``; returns the exit status. `transport` replaces the
    network (tests pass an ``httpx.MockTransport``)."""
    args = _parser().parse_args(argv)
    args.num_prompts = args.num_prompts or (12 if args.table else 32)
    console = Console(stderr=args.json, width=None if sys.stdout.isatty() else 160)  # pipes: no wrapped tables
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    names = (
        TABLE_WORKLOADS
        if args.table
        else ("chatbot-bad", "chatbot")
        if args.compare_bad_vs_prompt
        else (args.workload,)
    )
    try:
        with progress:
            with _server(args) as url:
                results = asyncio.run(_run(args, url, names, progress, transport))
            uncached: list[BenchResult] = []
            if args.table:
                if args.nocache_url:
                    uncached = asyncio.run(_run(args, args.nocache_url, names, progress, transport))
                else:
                    with _server(args, disable_radix_cache=True) as url:
                        uncached = asyncio.run(_run(args, url, names, progress, transport))
    except (RuntimeError, TimeoutError, APIError) as exc:
        console.print(f"[red]radixgate bench serving: {exc}[/red]")
        return 2
    if args.json:
        payload = {"results": [r.to_dict() for r in results]}
        if uncached:
            payload["no_cache"] = [r.to_dict() for r in uncached]
        print(json.dumps(payload, indent=2))
    elif args.table:
        console.print(_workload_table(results, uncached))
    else:
        title = "Same content: bad order vs Prompt" if args.compare_bad_vs_prompt else "radixgate bench serving"
        console.print(_results_table(results, title))
    _report_errors(Console(stderr=True), [*results, *uncached])
    return 1 if any(r.failed for r in [*results, *uncached]) else 0


if __name__ == "__main__":
    sys.exit(main())
