"""`radixgate bench router --preset NAME [--against sglang-router]`: one preset of the router's workload
family (`router_presets.py`) through every router in front of the same local workers.

    radixgate bench router --preset heldout-16x12 --against sglang-router
    radixgate bench router --preset tune-multiturn --simulate --seed 1      # seconds, no servers
    radixgate bench router --preset mooncake-conv-2000 --trace conversation_trace.jsonl --against sglang-router

Live, it starts the preset's N `radixgate serve` workers (127.0.0.1, free ports, the tiny model, pools
from the preset), warms each worker up with a few untimed requests, and runs the workload, the
workers' caches flushed before each run, through:
round robin, least load and radixgate's `cache_aware` with the workers' KV events off (the router
guesses what each holds), then, on workers restarted with KV events on, radixgate's `cache_aware`
(exact) and `sglang-router` 0.3.2 `--policy cache_aware` (its defaults), alternating run for run for
`--rounds` rounds. Every process it starts is stopped before it returns. Beside each row: the
independent references of `router_bounds.py` over the requests as that run sent them (Belady over
one cache of the summed pools, an upper bound; LRU over the summed size, a reference), and live,
the router process's CPU per answered request.
`--tagged` sends every row's requests tagged as radixgate's SDK tags them (`metadata.prompt_template`
per system message, `static_prefix_chars` its length) and `--worker-eviction-policy P` starts the
workers with `--radix-eviction-policy P`: with `template`, whatever gateway sees the tags (a
radixgate front, or each worker's own behind a router that passes `metadata` on) credits a
returning template's static prefix; tagged, each run gets freshly started workers, so
no run inherits the template statistics a worker's own gateway kept from the one before.
`--simulate` runs the gateway's own `Router` over one LRU `RadixCache` per worker instead
(`router_sim.py`; its req/s is modelled, labelled so); SGLang's router is not simulated.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from radixgate.engine.kvcache.eviction import EVICTION_POLICIES

from .router_bounds import belady_bound, lru_reference
from .router_presets import MAX_TOKENS, PRESETS, REPORTING, TEMPERATURE, Preset, build, pool_tokens
from .router_workload import prompt_ids
from .sglang_router_process import SglRouter

ROUTERS_GUESS = ("round_robin", "least_load", "radixgate (guess)")
ROUTERS_EVENTS = ("radixgate (KV events)", "sgl-router")


@dataclass
class Row:
    router: str
    hit_rate: float
    rps: float
    bound: float  # Belady over one cache of the summed pools, this run's requests in the order sent
    lru: float
    ok: int
    failed: int
    modelled: bool = False
    first_error: str | None = None  # what the first failed request was told
    cpu_ms: float | None = None  # the router process's CPU time (all threads) per answered request, live only

    @property
    def vs_bound(self) -> float:
        return self.hit_rate / self.bound if self.bound else 0.0


def _tags(messages: list[dict[str, str]]) -> dict[str, Any]:
    """The SDK's tags for a turn: its system message names the template and is its static part."""
    system = messages[0]["content"]
    template = f"t-{zlib.crc32(system.encode()):08x}"
    return {"metadata": {"prompt_template": template, "static_prefix_chars": str(len(system))}}


async def _drive(
    base_url: str,
    sessions: Sequence[Sequence[list[dict[str, str]]]],
    arrivals: Sequence[float],
    concurrency: int,
    tagged: bool = False,
) -> tuple[list[int], list[tuple[int, int, str | None]], float]:
    """Sessions in order, each no earlier than its arrival, `concurrency` at once, turns in order.
    Returns the (session, turn) index of each request in the order sent, results, wall time."""
    slots = asyncio.Semaphore(concurrency)
    sent: list[int] = []
    results: list[tuple[int, int, str | None]] = []
    offsets = [0]
    for s in sessions:
        offsets.append(offsets[-1] + len(s))

    async def one(client: httpx.AsyncClient, index: int) -> None:
        try:
            for turn, messages in enumerate(sessions[index]):
                sent.append(offsets[index] + turn)
                body = {"model": "tiny", "messages": messages, "max_tokens": MAX_TOKENS, "temperature": TEMPERATURE}
                body |= _tags(messages) if tagged else {}
                try:
                    r = await client.post("/v1/chat/completions", json=body)
                    usage = r.json().get("usage") if r.status_code == 200 else None
                except (httpx.HTTPError, ValueError) as exc:
                    results.append((0, 0, f"{type(exc).__name__}: {exc}"))
                    continue
                if usage is None:
                    results.append((0, 0, f"{r.status_code}: {r.text[:200]}"))
                    continue
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                results.append((usage["prompt_tokens"], cached, None))
        finally:
            slots.release()

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:
        start = time.perf_counter()
        tasks = []
        for index, arrival in enumerate(arrivals):
            delay = start + arrival - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            tasks.append(asyncio.create_task(one(client, index)))
        await asyncio.gather(*tasks)
        return sent, results, time.perf_counter() - start


def _flush(urls: Sequence[str]) -> None:
    for url in urls:
        for _ in range(50):  # refused while a previous run's requests finish
            if httpx.post(f"{url}/flush_cache", timeout=30).status_code == 200:
                break
            time.sleep(0.2)


def _warm_up(urls: Sequence[str], sessions: Sequence[Sequence[list[dict[str, str]]]], concurrency: int) -> None:
    """A few sessions straight to each fresh worker, untimed (flushed before every run): a worker's
    first requests are slow, and the router run first would pay for them."""
    warm = [s[:1] for s in sessions[:concurrency]]
    for url in urls:
        asyncio.run(_drive(url, warm, [0.0] * len(warm), concurrency))


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its children, every thread counted."""
    import psutil

    process = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in [process, *process.children(recursive=True)])


def _row(
    name: str,
    prompts: Sequence[list[int]],
    capacity: int,
    sent: list[int],
    results: list[tuple[int, int, str | None]],
    wall: float,
) -> Row:
    ok = [r for r in results if r[2] is None]
    prompt, cached = sum(r[0] for r in ok), sum(r[1] for r in ok)
    order = [(None, prompts[i]) for i in sent]
    errors = [r[2] for r in results if r[2] is not None]
    return Row(
        name,
        cached / prompt if prompt else 0.0,
        len(ok) / wall if wall else 0.0,
        belady_bound(order, capacity),
        lru_reference(order, capacity),
        len(ok),
        len(results) - len(ok),
        first_error=errors[0] if errors else None,
    )


def run_live(preset: Preset, workload: Any, prompts: list[list[int]], pool: int, args: argparse.Namespace) -> list[Row]:
    from radixgate.gateway.server_process import ServerProcess

    capacity = pool * preset.workers
    # One cache secret for the workers and the fronts: KV events' hashes are keyed by it, and a front
    # with another secret would never match what the workers announce.
    env = {"RADIXGATE_NUM_THREADS": "1", "RADIXGATE_CACHE_SECRET": secrets.token_hex(16)}
    rows: list[Row] = []

    def run(name: str, base_url: str, urls: list[str], pid: int) -> None:
        _flush(urls)
        cpu_before = _cpu_s(pid)
        drive = _drive(base_url, workload.sessions, workload.arrivals, preset.concurrency, args.tagged)
        sent, results, wall = asyncio.run(drive)
        row = _row(name, prompts, capacity, sent, results, wall)
        row.cpu_ms = 1000 * (_cpu_s(pid) - cpu_before) / max(1, row.ok)
        print(
            f"  {name}: hit {row.hit_rate:.3f} (bound {row.bound:.3f}), {row.rps:.2f} req/s, "
            f"router CPU {row.cpu_ms:.2f} ms/req, {row.failed} failed",
            flush=True,
        )
        if row.first_error:
            print(f"    first failure: {row.first_error}", flush=True)
        rows.append(row)

    def front(policy: str, urls: list[str]) -> ServerProcess:
        flags = ["--router-policy", policy]
        for url in urls:
            flags += ["--worker", url]
        return ServerProcess(flags, env=env)

    for events in (False, True):
        names = ROUTERS_EVENTS if events else ROUTERS_GUESS
        names = tuple(n for n in names if n != "sgl-router" or args.against == "sglang-router")
        if not any(n in args.routers for n in names):
            continue
        flags = ["--max-total-tokens", str(pool), "--radix-eviction-policy", args.worker_eviction_policy]
        flags += ["--enable-kv-events"] if events else []
        workers: list[ServerProcess] = []
        try:
            for _ in range(args.rounds if events else 1):
                for name in names:
                    if name not in args.routers:
                        continue
                    # Tagged, every run gets fresh workers: a worker's own gateway keeps the template
                    # statistics of what reached it tagged (behind SGLang's router), and would credit the
                    # next run's templates from their first request.
                    if not workers or args.tagged:
                        for w in workers:
                            w.stop()
                        workers = [ServerProcess(flags, env=env) for _ in range(preset.workers)]
                        urls = [w.start().base_url for w in workers]  # a failed start: `finally` stops all
                        _warm_up(urls, workload.sessions, preset.concurrency)
                    if name == "sgl-router":
                        with SglRouter(urls, args.sgl_log) as sgl:
                            assert sgl.process is not None
                            run(name, sgl.base_url, urls, sgl.process.pid)
                        continue
                    policy = name if not name.startswith("radixgate") else "cache_aware"
                    with front(policy, urls) as f:
                        assert f.process is not None
                        run(name, f.base_url, urls, f.process.pid)
        finally:
            for w in workers:
                w.stop()
    return rows


def run_simulated(preset: Preset, workload: Any, prompts: list[list[int]], pool: int) -> list[Row]:
    from .router_sim import simulate

    sessions, i = [], 0
    for s in workload.sessions:
        sessions.append([(None, prompts[i + k]) for k in range(len(s))])
        i += len(s)
    order = [(None, p) for p in prompts]  # the simulator's send order is not returned: session order
    bound, lru = belady_bound(order, pool * preset.workers), lru_reference(order, pool * preset.workers)
    rows = []
    for name, policy, events in [
        ("round_robin", "round_robin", False),
        ("least_load", "least_load", False),
        ("radixgate (guess)", "cache_aware", False),
        ("radixgate (KV events)", "cache_aware", True),
    ]:
        r = simulate(sessions, policy, preset.workers, pool, preset.concurrency, events=events, max_tokens=MAX_TOKENS)
        rows.append(
            Row(
                name,
                r.hit_rate,
                r.rps,
                bound,
                lru,
                r.num_requests,
                0,
                modelled=True,
            )
        )
    return rows


def print_rows(preset: Preset, seed: int, pool: int, num_requests: int, rows: Sequence[Row]) -> None:
    modelled = any(r.modelled for r in rows)
    print(
        f"\n{preset.name} ({preset.role}, seed {seed}): {num_requests} requests, {preset.workers} workers with "
        f"{pool}-token pools, {preset.concurrency} in flight, temperature {TEMPERATURE}, max_tokens {MAX_TOKENS}, "
        f"history keeping off" + (" (simulated: LRU radix caches, modelled req/s)" if modelled else "")
    )
    rps = "req/s*" if modelled else "req/s"
    live = any(r.cpu_ms is not None for r in rows)
    header = f"{'router':<22} {'hit':>6} {rps:>7} {'hit/bound':>9} {'ok':>5} {'failed':>6}"
    header += f" {'CPU ms/req':>10}" if live else ""
    print(header)
    print("-" * len(header))
    for r in rows:
        line = f"{r.router:<22} {r.hit_rate:>6.3f} {r.rps:>7.2f} {r.vs_bound:>9.3f} {r.ok:>5} {r.failed:>6}"
        print(line + (f" {r.cpu_ms:>10.2f}" if r.cpu_ms is not None else ""))
    if rows:
        bound = max(r.bound for r in rows)
        lru = max(r.lru for r in rows)
        print(f"{'Belady, summed pools':<22} {bound:>6.3f}   (upper bound: no router over these pools hits more)")
        print(f"{'LRU, summed pools':<22} {lru:>6.3f}   (reference)")
    by = {r.router: r for r in rows}
    ours, peer = by.get("radixgate (KV events)"), by.get("sgl-router")
    if ours and peer and peer.rps:
        print(
            f"radixgate (KV events) vs sgl-router: hit {ours.hit_rate - peer.hit_rate:+.3f}, "
            f"req/s x{ours.rps / peer.rps:.2f}"
        )
    if modelled:
        print("req/s*: requests per million modelled token-times, for ratios only")
    if live:
        print("CPU ms/req: the router process's user + system CPU (all threads) over the run, per answered request")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="radixgate bench router", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", required=True, help=f"comma list of: {', '.join(PRESETS)}; or 'reporting'/'tuning'")
    p.add_argument("--against", choices=["sglang-router"], default=None, help="also run SGLang's router")
    p.add_argument("--seed", type=int, default=None, help="default: the preset's first seed (reporting: 100)")
    p.add_argument("--trace", default=None, help="the Mooncake conversation trace (JSON lines), for trace presets")
    p.add_argument("--rounds", type=int, default=1, help="alternating rounds of radixgate (KV events) and sgl-router")
    p.add_argument("--routers", default=",".join(ROUTERS_GUESS + ROUTERS_EVENTS), help="comma list of rows to run")
    p.add_argument("--limit", type=int, default=None, help="only the first N sessions (quick iterations)")
    p.add_argument("--simulate", action="store_true", help="the gateway's Router over simulated caches, no servers")
    p.add_argument("--tagged", action="store_true", help="live: requests tagged as radixgate's SDK tags them")
    p.add_argument(
        "--worker-eviction-policy", default="lru", choices=EVICTION_POLICIES, help="live: the workers' eviction policy"
    )
    p.add_argument("--sgl-log", default="/tmp/radixgate-bench-sgl-router.log", help="sglang-router's output")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.simulate and (args.tagged or args.worker_eviction_policy != "lru"):
        parser.error("--tagged and --worker-eviction-policy are for live runs; --simulate has neither")
    names = [
        n
        for part in args.preset.split(",")
        for n in ([k for k, v in PRESETS.items() if v.role == part] if part in ("tuning", REPORTING) else [part])
    ]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        print(f"--preset: unknown {unknown[0]!r}; choose from {', '.join(PRESETS)}", file=sys.stderr)
        return 2
    args.routers = {r.strip() for r in args.routers.split(",")}
    if args.against == "sglang-router" and shutil.which("sglang-router") is None and not args.simulate:
        try:
            import sglang_router  # noqa: F401
        except ImportError:
            print("--against sglang-router needs sglang-router==0.3.2 (the dev extra)", file=sys.stderr)
            return 2
    if not args.simulate:
        try:
            import psutil  # noqa: F401
        except ImportError:
            print("a live run measures each router's CPU with psutil (the dev extra)", file=sys.stderr)
            return 2
    from radixgate.gateway.workers.front import load_front_tokenizer

    tokenizer = load_front_tokenizer("tiny")
    for name in names:
        preset = PRESETS[name]
        seed = preset.seeds[0] if args.seed is None else args.seed
        try:
            workload = build(preset, seed, tokenizer, args.trace)
        except (ValueError, OSError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 2
        if args.limit is not None:
            workload.sessions, workload.arrivals = workload.sessions[: args.limit], workload.arrivals[: args.limit]
        prompts = [prompt_ids(tokenizer, m) for s in workload.sessions for m in s]
        pool = pool_tokens(preset, prompts)
        print(f"{name}: {len(prompts)} requests, pool {pool} tokens per worker", flush=True)
        try:
            rows = (
                run_simulated(preset, workload, prompts, pool)
                if args.simulate
                else run_live(preset, workload, prompts, pool, args)
            )
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        print_rows(preset, seed, pool, len(prompts), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
