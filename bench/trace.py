"""`radixgate bench trace --trace FILE --simulate`: a Mooncake-format trace replayed through the
engine's own `RadixCache`, one run per eviction policy and pool size, beside what an infinite
cache and Belady's optimum would hit (`cache_bounds.py`, which shares no code with the engine).

Each of the trace's 512-token blocks becomes a fixed pseudo-random block of `--block-tokens`
tokens (16: the trace's blocks scaled down 32 times; hit rates are per block, so the scale changes
only the speed). The tree's page is one block. Requests run one after another in arrival order
(the timestamps only order them): each matches its prefix and locks it, evicts under its policy
until its other blocks fit, inserts its input, and unlocks, as the engine's cache manager does.
Output tokens are not inserted: the trace's ids describe input blocks only. The hit rate is input
blocks served from the cache / input blocks.

`--part second` counts only the requests of the trace's second time half (all are replayed, so
the cache is warm); `q1`..`q4` count a quarter of the span: `q1` tunes, `q2` checks a candidate,
`second` reports (docs/engine.md, "Trace replay"). Pools are fractions of the trace's distinct blocks.
`--url URL` replays the trace live against a server instead (`trace_live.py`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

from radixgate.bench.cache_bounds import (
    MOONCAKE_BLOCK_TOKENS,
    TIME_PARTS,
    TraceRequest,
    belady_hits,
    counted_part,
    distinct_blocks,
    infinite_hits,
    load_trace,
)
from radixgate.engine.config import EngineConfig
from radixgate.engine.kvcache.eviction import EVICTION_POLICIES
from radixgate.engine.kvcache.radix_cache import RadixCache
from radixgate.engine.kvcache.tenant_share import TenantShares

_HASH = 2654435761  # Knuth's multiplicative hash: odd, so a bijection modulo 2**31


def block_tokens(block_id: int, size: int) -> tuple[int, ...]:
    """The fixed pseudo-random tokens standing for one trace block (distinct blocks never share a token)."""
    return tuple(((block_id * size + i) * _HASH) % 2**31 for i in range(size))


class PoolTree:
    """A RadixCache over a pool of `capacity` slots, serving one request at a time as the engine's
    cache manager does: match and lock its prefix, evict until its other tokens fit, insert its
    tokens (a request larger than the pool caches what fits), unlock."""

    def __init__(self, page: int, capacity: int, policy: str) -> None:
        self.capacity, self.free, self.next_slot = capacity, capacity, 0
        self.cache = RadixCache(page, self._free_slots, policy)

    def _free_slots(self, slots: Sequence[int]) -> None:
        self.free += len(slots)

    def serve(self, key: Sequence[int], priority: int = 0, credit: tuple[int, int] | None = None) -> int:
        """Tokens of `key` found cached. `priority` goes to the nodes it matches and inserts;
        `credit` (tokens, priority) raises that of the nodes of its first `tokens` alone."""
        m = self.cache.match(key, priority=priority)
        hit = len(m.device_slots)
        self.cache.inc_lock_ref(m.node)
        need = len(key) - hit
        if need > self.free:
            self.cache.evict(need - self.free)
        fits = hit + min(need, self.free)
        self.free -= fits - hit
        slots = (*m.device_slots, *range(self.next_slot, self.next_slot + fits - hit))
        self.cache.insert(key[:fits], slots, start=m.node, priority=priority)
        self.next_slot += fits - hit
        if credit is not None and credit[1]:
            self.cache.match(key[: min(credit[0], fits)], priority=credit[1], count_hit=False)
        self.cache.dec_lock_ref(m.node)
        return hit

    def check(self) -> None:
        assert self.free + self.cache.evictable_size == self.capacity, "pool leaked"
        assert self.cache.protected_size == 0, "a request's lock was left"


def replay(
    requests: Sequence[TraceRequest],
    counted: Sequence[bool],
    policy: str,
    pool_blocks: int,
    size: int = 16,
    fair: bool = False,
) -> tuple[int, int]:
    """(blocks hit, blocks counted) through a RadixCache of `pool_blocks` blocks under `policy`;
    `fair`: with tenant fair share on, as the engine sets it (the trace is one tenant)."""
    tree = PoolTree(size, pool_blocks * size, policy)
    shares = TenantShares(pool_blocks * size) if fair else None
    tree.cache.fair = shares
    tokens: dict[int, tuple[int, ...]] = {}
    hits = total = 0
    for request, count in zip(requests, counted, strict=True):
        key: list[int] = []
        for h in request.hash_ids:
            block = tokens.get(h)
            if block is None:
                block = tokens[h] = block_tokens(h, size)
            key += block
        if shares is not None:
            shares.seen(None)  # the trace's one tenant (the tree's default namespace) is active
        hit = tree.serve(key)
        if count:
            hits, total = hits + hit // size, total + len(request.hash_ids)
    tree.check()
    return hits, total


def tree_speed(
    policies: Sequence[str], num_requests: int = 2000, repeats: int = 9, fair: bool = False
) -> dict[str, tuple[float, float]]:
    """match + insert per second under each policy, on `bench offline`'s tree workload (1000 shared +
    200 unique tokens per request, page 1) with a pool of a quarter of its tokens, so every insert
    also evicts. policy -> (best of `repeats` in this thread's CPU time, the median over the repeats
    of its rate / lru's in the same repeat): the policies interleaved and paired, so that other work
    on a shared machine slows them alike. `policies` must include lru. `fair`: each tree with tenant
    fair share on (one tenant), lru's included."""
    import random

    rng = random.Random(1)
    prefix = [rng.randrange(1, 32000) for _ in range(1000)]
    keys = [tuple(prefix + [rng.randrange(1, 32000) for _ in range(200)]) for _ in range(num_requests)]
    pool = num_requests * 1200 // 4
    rates: dict[str, list[float]] = {p: [] for p in policies}
    for _ in range(repeats):
        for policy in policies:
            cache = RadixCache(1, lambda slots: None, policy)
            shares = TenantShares(pool) if fair else None
            cache.fair = shares
            next_slot = 0
            start = time.thread_time()
            for key in keys:
                if shares is not None:
                    shares.seen(None)
                slots, node = cache.match_prefix(key)
                new = range(next_slot, next_slot + len(key) - len(slots))
                next_slot += len(new)
                cache.insert(key, (*slots, *new), start=node)
                if cache.evictable_size > pool:
                    cache.evict(cache.evictable_size - pool)
            rates[policy].append(num_requests / (time.thread_time() - start))
    paired = {p: sorted(r / lru for r, lru in zip(rates[p], rates["lru"], strict=True)) for p in policies}
    return {p: (max(rates[p]), paired[p][repeats // 2]) for p in policies}


def simulate(
    requests: Sequence[TraceRequest],
    part: str,
    fractions: Sequence[float],
    policies: Sequence[str],
    size: int,
    fair: bool = False,
) -> dict:
    counted = counted_part(requests, part)
    distinct = distinct_blocks(requests)
    rows = []
    for fraction in fractions:
        pool = max(1, int(distinct * fraction))
        row: dict = {"pool_fraction": fraction, "pool_blocks": pool, "hit_rate": {}}
        for policy in policies:
            hits, total = replay(requests, counted, policy, pool, size, fair)
            row["hit_rate"][policy] = hits / max(total, 1)
        hits, total = belady_hits(requests, counted, pool)
        row["belady"] = hits / max(total, 1)
        rows.append(row)
    hits, total = infinite_hits(requests, counted)
    return {
        "requests": len(requests),
        "counted_requests": sum(counted),
        "counted_blocks": total,
        "distinct_blocks": distinct,
        "block_tokens": size,
        "scale": MOONCAKE_BLOCK_TOKENS // size,
        "part": part,
        "tenant_cache_fairness": fair,
        "infinite": hits / max(total, 1),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="radixgate bench trace", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--trace", action="append", default=[], help="a Mooncake-format JSON-lines trace (repeatable)")
    p.add_argument("--simulate", action="store_true", help="replay through RadixCache alone")
    p.add_argument("--url", default=None, help="replay live against this server's /generate instead (trace_live.py)")
    p.add_argument(
        "--api-key", default=None, help="with --url: a key for a server with keys (default $RADIXGATE_API_KEY)"
    )
    p.add_argument(
        "--speedup", type=float, default=None, help="with --url: send at trace times / this (default: back to back)"
    )
    p.add_argument(
        "--vocab-tokens", type=int, default=50_000, help="with --url: token ids 1000.. this + 1000 stand for blocks"
    )
    p.add_argument(
        "--part",
        choices=TIME_PARTS,
        default="all",
        help="which part of the trace's time span counts: a half (first, second) or a quarter (q1..q4)",
    )
    p.add_argument("--pool-fractions", default="0.1,0.25,0.5", help="pools, as fractions of the distinct blocks")
    p.add_argument("--policies", default=",".join(EVICTION_POLICIES), help="comma list (default: every policy)")
    p.add_argument("--block-tokens", type=int, default=16, help="tokens standing for one 512-token trace block")
    p.add_argument("--limit", type=int, default=None, help="replay only the first N requests of each trace")
    p.add_argument("--tree-speed", action="store_true", help="also time match+insert per policy against lru")
    p.add_argument(
        "--tenant-cache-fairness",
        choices=["on", "off"],
        default="on" if EngineConfig.tenant_cache_fairness else "off",
        help="with --simulate and --tree-speed: tenant fair share on the tree, as the engine sets it (the trace is "
        "one tenant; default: the engine's default)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    args = p.parse_args(argv)
    policies = [s for s in args.policies.split(",") if s]
    bad = [s for s in policies if s not in EVICTION_POLICIES]
    if bad:
        p.error(f"--policies: {bad[0]!r} is not one of {', '.join(EVICTION_POLICIES)}")
    if not args.trace and not args.tree_speed:
        p.error("give --trace FILE (and --simulate), or --tree-speed")
    if args.trace and args.simulate == bool(args.url):
        p.error("give one of --simulate (RadixCache alone) and --url URL (a live server)")
    if not 1 <= args.block_tokens <= MOONCAKE_BLOCK_TOKENS:
        p.error(f"--block-tokens must be in 1..{MOONCAKE_BLOCK_TOKENS}")
    try:
        fractions = [float(f) for f in args.pool_fractions.split(",")]
    except ValueError:
        p.error(f"--pool-fractions: {args.pool_fractions!r} is not a comma list of numbers")
    if not all(0 < f <= 1 for f in fractions):
        p.error("--pool-fractions must lie in (0, 1]")
    result: dict = {"traces": {}}
    for path in args.trace:
        try:
            requests = load_trace(path, args.limit)
        except (OSError, ValueError) as e:
            p.error(f"--trace: {e}")
        if args.url:
            return _live(args, path, requests)
        fair = args.tenant_cache_fairness == "on"
        result["traces"][path] = simulate(requests, args.part, fractions, policies, args.block_tokens, fair)
    if args.tree_speed:
        ordered = sorted(set(policies) | {"lru"}, key=EVICTION_POLICIES.index)
        speed = tree_speed(ordered, fair=args.tenant_cache_fairness == "on")
        result["tree_match_insert_per_s"] = speed
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_tables(result, policies)
    return 0


def _live(args: argparse.Namespace, path: str, requests: Sequence[TraceRequest]) -> int:
    import os

    import httpx

    from radixgate.bench.trace_live import replay_live

    counted = counted_part(requests, args.part)
    key = args.api_key or os.environ.get("RADIXGATE_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else None
    with httpx.Client(base_url=args.url.rstrip("/"), timeout=600) as client:
        r = replay_live(client, requests, counted, args.block_tokens, vocab_tokens=args.vocab_tokens,
                        speedup=args.speedup, headers=headers)  # fmt: skip
    if args.json:
        print(json.dumps({path: r}, indent=2))
        return 0
    print(
        f"{path} live at {args.url}: pool {r['pool_blocks']} blocks of {args.block_tokens} tokens, "
        f"{r['counted_blocks']} blocks counted ({args.part} part), {r['skipped_requests']} requests over the context"
    )
    print(
        f"  live {r['live']:.3f}   simulated lru {r['simulated_lru']:.3f}   "
        f"belady* {r['belady']:.3f}   infinite {r['infinite']:.3f}"
    )
    return 0


def _print_tables(result: dict, policies: Sequence[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console.width = 150  # piped: keep every column readable
    for path, t in result["traces"].items():
        # The description is its own line: as a table title it would wrap to the table's width, and
        # where it breaks would depend on how long the trace's path is.
        console.print(
            f"{path}: {t['requests']} requests, {t['distinct_blocks']} distinct blocks; hit rate over the "
            f"{t['part']} part ({t['counted_requests']} requests, {t['counted_blocks']} blocks); one block = "
            f"{t['block_tokens']} tokens (the trace's 512 scaled down {t['scale']}x); tenant fair share "
            f"{'on' if t['tenant_cache_fairness'] else 'off'}",
            soft_wrap=True,
        )
        table = Table()
        for col in ("pool", *policies, "belady*", "infinite"):
            table.add_column(col, justify="right")
        for row in t["rows"]:
            rates = [row["hit_rate"][p] for p in policies]
            best = max(rates)
            cells = [f"[bold]{r:.3f}[/bold]" if r == best else f"{r:.3f}" for r in rates]
            pool = f"{row['pool_fraction']:.0%} ({row['pool_blocks']})"
            table.add_row(pool, *cells, f"{row['belady']:.3f}", f"{t['infinite']:.3f}")
        console.print(table)
    if result["traces"]:
        console.print(
            "* Belady is block-level: it keeps blocks without their prefixes, so it bounds every tree policy from "
            "above. `priority` equals lru here: the trace carries no request priorities."
        )
    speed = result.get("tree_match_insert_per_s")
    if speed:
        table = Table(
            title="radix tree match+insert/s per policy, CPU time (2000 requests, 1000 shared + 200 unique "
            "tokens, a pool of a quarter of them: every insert evicts)"
        )
        table.add_column("policy")
        table.add_column("match+insert/s", justify="right")
        table.add_column("/ lru (median of paired runs)", justify="right")
        for policy, (ops, ratio) in speed.items():
            table.add_row(policy, f"{ops:,.0f}", f"{ratio:.2f}")
        console.print(table)


if __name__ == "__main__":
    raise SystemExit(main())
