"""`radixgate bench router`: routing policies over N local workers whose KV pools are smaller than
the working set, on one seeded workload, with the hit rate an ideal cache would reach.

    radixgate bench router --workers 2
    radixgate bench router --workers 4 --skew
    radixgate bench router --workers 2 --simulate    # seconds: LRU radix caches, no servers
    radixgate bench router --preset heldout-16x12 --against sglang-router   # router_peer.py

It starts N `radixgate serve` workers (tiny model, `--max-total-tokens` = pool fraction x working
set) and, per policy, a front gateway in front of them (`--worker`, two tenant keys); workers'
caches are flushed between policies. Workload: templates (system prompts) with Zipf popularity,
multi-turn sessions (each turn re-sends the history), two tenants each owning half of the templates
(`--tenant-templates shared`: both use every template). Pools are `--pool-fraction` of the working
set, by default the reusable prefix set (the distinct tenant-template system prompts); the defaults
are calibrated to the issue's anchor measurement (docs/gateway.md, "Routing"). `--skew` gives one
template half the sessions. `--simulate` runs the same workload through the gateway's router over
one LRU radix cache per worker (`router_sim.py`) in seconds.

Per policy it prints: the served hit rate (prompt tokens the engines reported cached / prompt
tokens), the references of `router_bounds.py` over the requests in the order they were sent
(Belady over one cache of the workers' summed capacity, an upper bound; LRU of that size),
requests/s, TTFT p50/p99 at the client, and max/mean of
the per-worker in-flight requests (sampled every 10 ms from the gateway's `/workers`,
time-averaged per worker), and the share of mispredicted requests (the router predicted at least
one block cached on the chosen worker, the worker served none; from the gateway's `/workers`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from radixgate.gateway.server_process import ServerProcess
from radixgate.gateway.workers.front import load_front_tokenizer

from .router_bounds import belady_bound, lru_reference
from .router_workload import (  # noqa: F401  (bench ray uses them from here)
    TENANT_KEYS,
    Session,
    build_workload,
    ideal_hit_rate,
    make_sessions,
    make_templates,
    print_vs_round_robin,
    prompt_ids,
)

ADMIN_KEY = "bench-admin"
WORKER_KEY = "bench-worker-key"
SAMPLE_S = 0.01
# One cache secret for workers and fronts: KV events' hashes are keyed by it (else they never match).
SECRET_ENV = {"RADIXGATE_CACHE_SECRET": secrets.token_hex(16)}


@dataclass
class PolicyResult:
    policy: str
    hit_rate: float
    ideal: float  # LRU over the summed pools, same requests, same order (router_bounds.lru_reference)
    rps: float
    ttft_p50: float
    ttft_p99: float
    balance: float  # max / mean of the per-worker time-averaged in-flight requests
    num_ok: int
    num_failed: int
    per_worker_inflight: list[float] = field(default_factory=list)
    mispredicted: float = 0.0  # share of requests: predicted >= 1 block on the chosen worker, served none
    bound: float = 0.0  # Belady over one cache of the summed pools (router_bounds): no router hits more

    @property
    def vs_ideal(self) -> float:
        return self.hit_rate / self.ideal if self.ideal else 0.0


class InflightSampler(threading.Thread):
    """Polls the gateway's `/workers` every 10 ms; time-averages each worker's in-flight requests."""

    def __init__(self, base_url: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.stop = threading.Event()
        self.weighted: dict[str, float] = {}
        self.elapsed = 0.0

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=5) as client:
            last = time.perf_counter()
            previous: dict[str, int] = {}
            while not self.stop.is_set():
                try:
                    workers = client.get("/workers").json()["workers"]
                except (httpx.HTTPError, ValueError, KeyError):
                    workers = []
                now = time.perf_counter()
                for worker_id, n in previous.items():  # the level held since the last sample
                    self.weighted[worker_id] = self.weighted.get(worker_id, 0.0) + n * (now - last)
                self.elapsed += now - last
                previous = {w["id"]: w["in_flight"] for w in workers} or previous
                last = now
                self.stop.wait(SAMPLE_S)

    def averages(self) -> list[float]:
        return [v / self.elapsed for v in self.weighted.values()] if self.elapsed else []


async def _one_request(
    client: httpx.AsyncClient, key: str, messages: list[dict[str, str]], max_tokens: int
) -> tuple[float | None, int, int, str | None]:
    """(TTFT, prompt tokens, cached tokens, error) of one streamed chat completion."""
    body = {
        "model": "tiny",
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    ttft, usage, error = None, None, None
    try:
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as r:
            if r.status_code != 200:
                return None, 0, 0, f"{r.status_code}: {(await r.aread())[:200]!r}"
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    error = event["error"].get("message")
                    continue
                if ttft is None and any(c.get("delta", {}).get("content") for c in event.get("choices") or []):
                    ttft = time.perf_counter() - start
                usage = event.get("usage") or usage
    except httpx.HTTPError as exc:
        return None, 0, 0, f"{type(exc).__name__}: {exc}"
    if usage is None:
        return ttft, 0, 0, error or "no usage in the stream"
    return ttft, usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], error


async def drive(
    base_url: str, sessions: list[Session], concurrency: int, max_tokens: int, tokenizer: Any
) -> tuple[list[tuple[str, list[int]]], list[tuple[float | None, int, int, str | None]], float]:
    """Runs the sessions, `concurrency` at a time, each session's turns in order. Returns the
    requests in the order they were sent (tenant namespace, token ids), the results, the wall time."""
    queue: asyncio.Queue[Session] = asyncio.Queue()
    for session in sessions:
        queue.put_nowait(session)
    sent: list[tuple[str, list[int]]] = []
    results: list[tuple[float | None, int, int, str | None]] = []

    async def runner(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            session = queue.get_nowait()
            for messages in session.turns:
                sent.append((TENANT_KEYS[session.tenant_key], prompt_ids(tokenizer, messages)))
                results.append(await _one_request(client, session.tenant_key, messages, max_tokens))

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(runner(client) for _ in range(concurrency)))
        return sent, results, time.perf_counter() - start


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def flush_workers(urls: list[str]) -> None:
    for url in urls:
        for _ in range(50):  # refused while a previous run's aborted requests finish
            if httpx.post(f"{url}/flush_cache", headers={"Authorization": f"Bearer {WORKER_KEY}"}).status_code == 200:
                break
            time.sleep(0.2)


def run_policy(
    policy: str,
    worker_urls: list[str],
    args: argparse.Namespace,
    sessions: list[Session],
    tokenizer: Any,
    capacity: int,
) -> PolicyResult:
    flush_workers(worker_urls)
    keys_file = os.path.join(args.tmpdir, "keys.txt")
    front_args = ["--api-keys-file", keys_file, "--admin-api-key", ADMIN_KEY, "--worker-api-key", WORKER_KEY]
    front_args += ["--router-policy", policy]
    for url in worker_urls:
        front_args += ["--worker", url]
    with ServerProcess(front_args, env={"RADIXGATE_NUM_THREADS": "1", **SECRET_ENV}) as front:
        sampler = InflightSampler(front.base_url)
        sampler.start()
        sent, results, wall = asyncio.run(drive(front.base_url, sessions, args.concurrency, args.max_tokens, tokenizer))
        sampler.stop.set()
        sampler.join()
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        workers = httpx.get(f"{front.base_url}/workers", headers=admin).json()["workers"]
    result = summarize(policy, sent, results, wall, sampler, capacity)
    routed = sum(w["requests"] for w in workers)
    result.mispredicted = sum(w["mispredicted"] for w in workers) / routed if routed else 0.0
    return result


def summarize(
    policy: str,
    sent: list[tuple[str, list[int]]],
    results: list[tuple[float | None, int, int, str | None]],
    wall: float,
    sampler: InflightSampler,
    capacity: int,
) -> PolicyResult:
    """One run's figures: served hit rate, the ideal for the same requests, req/s, TTFT, balance."""
    ok = [r for r in results if r[3] is None]
    prompt = sum(r[1] for r in ok)
    cached = sum(r[2] for r in ok)
    ideal = lru_reference(sent, capacity)
    averages = sampler.averages()
    mean = sum(averages) / len(averages) if averages else 0.0
    ttfts = [r[0] for r in ok if r[0] is not None]
    return PolicyResult(
        policy,
        cached / prompt if prompt else 0.0,
        ideal,
        len(ok) / wall,
        _percentile(ttfts, 0.5),
        _percentile(ttfts, 0.99),
        max(averages) / mean if mean else float("nan"),
        len(ok),
        len(results) - len(ok),
        averages,
        bound=belady_bound(sent, capacity),
    )


def print_table(results: list[PolicyResult], title: str) -> None:
    print(f"\n{title}")
    header = (
        f"{'policy':<18} {'hit':>6} {'Belady':>6} {'LRU ref':>7} {'hit/Belady':>10} {'req/s':>7} {'TTFT p50':>9} "
        f"{'TTFT p99':>9} "
        f"{'inflight max/mean':>17} {'mispredicted':>12} {'ok':>4} {'failed':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.policy:<18} {r.hit_rate:>6.3f} {r.bound:>6.3f} {r.ideal:>7.3f} "
            f"{r.hit_rate / r.bound if r.bound else 0.0:>10.3f} {r.rps:>7.2f} "
            f"{r.ttft_p50 * 1000:>7.0f}ms {r.ttft_p99 * 1000:>7.0f}ms {r.balance:>17.3f} "
            f"{r.mispredicted:>11.1%} {r.num_ok:>4} {r.num_failed:>6}"
        )
    print_vs_round_robin(results)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="radixgate bench router", description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2, help="local radixgate workers")
    p.add_argument("--policies", default="round_robin,least_load,cache_aware")
    p.add_argument("--num-requests", type=int, default=192)
    p.add_argument("--num-templates", type=int, default=16)
    p.add_argument("--template-tokens", type=int, default=870)
    p.add_argument("--turns", type=int, default=6, help="turns per session")
    p.add_argument("--user-words", type=int, default=16, help="words per user message (replies: half)")
    p.add_argument("--zipf", type=float, default=0.8, help="template popularity exponent")
    p.add_argument("--pool-fraction", type=float, default=0.4, help="each worker's KV pool / working set")
    p.add_argument(
        "--working-set",
        choices=["prefixes", "all"],
        default="prefixes",
        help="prefixes: the distinct tenant-template prompts (what a cache must hold); all: every distinct token",
    )
    p.add_argument(
        "--tenant-templates", choices=["split", "shared"], default="split", help="each tenant owns half, or all"
    )
    p.add_argument("--simulate", action="store_true", help="LRU radix caches and the router, no servers (seconds)")
    p.add_argument("--sim-seeds", type=int, default=1, help="with --simulate: also the mean over this many seeds")
    p.add_argument("--concurrency", type=int, default=None, help="sessions at once (default 4 per worker)")
    p.add_argument("--max-tokens", type=int, default=2)
    p.add_argument("--skew", action="store_true", help="one template takes half the sessions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="also print the results as JSON")
    p.add_argument(
        "--kv-events",
        choices=["off", "on", "both"],
        default="off",
        help="workers publish KV events (the router is exact); both: also run cache_aware with events",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a.split("=")[0] in ("--preset", "--against") for a in argv):  # the preset family (router_peer.py)
        from .router_peer import main as peer_main

        return peer_main(argv)
    args = _parser().parse_args(argv)
    args.concurrency = args.concurrency or 4 * args.workers
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    tokenizer = load_front_tokenizer("tiny")
    workload = build_workload(args, tokenizer)
    sessions, pool = workload.sessions, workload.pool
    print(
        f"workload: {len(workload.requests)} requests in {len(sessions)} sessions of {args.turns} turns, "
        f"{args.num_templates} templates of ~{args.template_tokens} tokens (Zipf {args.zipf}), 2 tenants "
        f"({args.tenant_templates} templates); working set: prefixes {workload.prefixes} tokens, all distinct "
        f"{workload.distinct}; {args.workers} workers with {pool}-token pools ({args.pool_fraction:.0%} of "
        f"{args.working_set}), concurrency {args.concurrency}" + (", skewed" if args.skew else ""),
        flush=True,
    )
    if args.simulate:
        from .router_sim import run_simulation

        return run_simulation(args, tokenizer, workload, policies)
    try:
        args.events = args.kv_events == "on"
        results = run_local(args, sessions, tokenizer, pool, policies)
        if args.kv_events == "both":  # the same run once more, the router exact from the workers' events
            args.events = True
            exact = run_local(args, sessions, tokenizer, pool, ["cache_aware"])[0]
            exact.policy = "cache_aware+events"
            results.append(exact)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    print_table(results, f"{args.workers} workers{' (skew)' if args.skew else ''}")
    if args.json:
        print(json.dumps([r.__dict__ | {"vs_ideal": r.vs_ideal} for r in results], indent=1))
    return 0


def run_local(
    args: argparse.Namespace, sessions: list[Session], tokenizer: Any, pool: int, policies: list[str]
) -> list[PolicyResult]:
    """Each policy in turn over `args.workers` local workers with `pool`-token KV pools."""
    import tempfile

    capacity = pool * args.workers
    with tempfile.TemporaryDirectory() as tmpdir:
        args.tmpdir = tmpdir
        with open(os.path.join(tmpdir, "keys.txt"), "w") as f:
            f.writelines(f"{key} {tenant}\n" for key, tenant in TENANT_KEYS.items())
        worker_args = ["--max-total-tokens", str(pool), "--worker-api-key", WORKER_KEY, "--enable-debug-endpoints"]
        if getattr(args, "events", False):
            worker_args.append("--enable-kv-events")
        env = {"RADIXGATE_NUM_THREADS": "1", **SECRET_ENV}
        servers = [ServerProcess(worker_args, env=env) for _ in range(args.workers)]
        try:
            for server in servers:
                server.__enter__()
            urls = [s.base_url for s in servers]
            results = []
            for policy in policies:
                result = run_policy(policy, urls, args, sessions, tokenizer, capacity)
                print(
                    f"  {policy}: hit {result.hit_rate:.3f} (Belady {result.bound:.3f}), {result.rps:.2f} req/s",
                    flush=True,
                )
                results.append(result)
            for url in urls:
                r = httpx.get(f"{url}/debug/check_idle_invariant", headers={"Authorization": f"Bearer {WORKER_KEY}"})
                if r.status_code != 200:
                    raise RuntimeError(f"idle invariant failed on {url}: {r.text}")
        finally:
            for server in servers:
                server.__exit__(None, None, None)
    return results


if __name__ == "__main__":
    sys.exit(main())
