"""`radixgate bench router --simulate`: the router benchmark's workload and policies in seconds, no servers.

Each worker is one LRU `RadixCache` of the pool's size (the engine's own tree) serving prefill
batches: the waiting requests with the longest cached prefix first (the engine's "lpm" schedule),
as many as the pool holds, locked while they run; the router is the gateway's own `Router`, fed
the same in-flight counts and token loads the pool gives it. Clients are `concurrency` session
runners, each sending its session's turns in order, the next one when the previous finished, as the
live benchmark does.

Time is modelled, not measured: a batch occupies its worker for `overhead x requests + prefill
tokens + decode_cost x max_tokens` token-times, so the modelled req/s ratio between policies follows the
prefill each one saves (the live benchmark measures it). Cache behaviour is the engine's: the
served hit is the worker's cached prefix of the prompt (all but its last token) when the request
starts; the prompt is then inserted and the least recently used leaves evicted down to the pool.

Modes: `approximate` (the router guesses each worker's cache from what it routed there) and
`events` (exact: what the worker's KV events would say, i.e. its tree in 16-token blocks, as of
routing time).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import statistics
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from radixgate.engine.kvcache.radix_cache import RadixCache, common_prefix_len
from radixgate.gateway.workers.router import BLOCK_TOKENS, Candidate, PrefixIndex, Router

from .router_bounds import belady_bound, lru_reference
from .router_workload import Workload, build_workload, print_vs_round_robin

OVERHEAD_TOKENS = 64  # a request's fixed cost, in prefill-token times
DECODE_TOKENS = 16  # one decode step, in prefill-token times


def cached_prefix(cache: RadixCache, ids: Sequence[int], namespace: Hashable) -> int:
    """Tokens of `ids` the tree holds, without touching its LRU order (what a KV-event index knows)."""
    node = cache.roots.get(namespace)
    pos = 0
    while node is not None and pos < len(ids):
        child = node.children.get(ids[pos])
        if child is None:
            break
        n = common_prefix_len(child.key, ids[pos : pos + len(child.key)])
        pos += n
        if n < len(child.key):
            break
        node = child
    return pos


class CacheView:
    """The exact index of one simulated worker: its tree in whole blocks, always in sync."""

    is_synced = True

    def __init__(self, cache: RadixCache) -> None:
        self.cache = cache

    def match_tokens(self, ids: Sequence[int], cache_salt: Hashable) -> int:
        n = cached_prefix(self.cache, ids, cache_salt)
        return n - n % BLOCK_TOKENS

    def num_blocks(self) -> int:
        return self.cache.evictable_size // BLOCK_TOKENS


@dataclass
class SimWorker:
    candidate: Candidate
    cache: RadixCache
    capacity: int
    queue: deque[int] = field(default_factory=deque)
    busy: bool = False
    inflight_area: float = 0.0  # integral of in-flight requests over time
    last_change: float = 0.0

    def account(self, now: float) -> None:
        self.inflight_area += self.candidate.num_requests * (now - self.last_change)
        self.last_change = now


@dataclass
class SimResult:
    policy: str
    hit_rate: float
    ideal: float  # LRU over the summed pools, same requests, same order (router_bounds.lru_reference)
    rps: float  # requests per million modelled token-times
    balance: float  # max / mean of the per-worker time-averaged in-flight requests
    num_mispredicted: int  # predicted >= 1 block on the chosen worker, served none
    num_requests: int
    predicted_tokens: int = 0
    best_tokens: int = 0
    bound: float = 0.0  # Belady over one cache of the summed pools: no router over them hits more

    @property
    def vs_ideal(self) -> float:
        return self.hit_rate / self.ideal if self.ideal else 0.0

    @property
    def vs_bound(self) -> float:
        return self.hit_rate / self.bound if self.bound else 0.0

    @property
    def mispredicted_rate(self) -> float:
        return self.num_mispredicted / self.num_requests if self.num_requests else 0.0


def simulate(
    sessions: Sequence[Sequence[tuple[str, list[int]]]],
    policy: str,
    num_workers: int,
    pool_tokens: int,
    concurrency: int,
    *,
    events: bool = False,
    max_tokens: int = 2,
    router: Router | None = None,
) -> SimResult:
    """Runs `sessions` (each a list of (tenant namespace, prompt ids) turns) through `policy`."""
    router = router or Router(policy)
    workers = []
    for i in range(num_workers):
        cache = RadixCache(1, lambda slots: None)
        candidate = Candidate(f"w{i}", PrefixIndex(pool_tokens // BLOCK_TOKENS))
        if events:
            candidate.exact = CacheView(cache)
        workers.append(SimWorker(candidate, cache, pool_tokens))
    by_id = {w.candidate.worker_id: w for w in workers}
    todo = deque(range(len(sessions)))
    # request state: (session, turn, worker id, choice, load)
    requests: list[tuple[int, int, str, int, int]] = []
    sent: list[tuple[str, list[int]]] = []
    served = prompt_total = mispredicted = predicted = best = 0
    events_heap: list[tuple[float, int, str, int]] = []
    seq = itertools.count()
    now = 0.0

    def send(session: int, turn: int) -> None:
        nonlocal predicted, best
        namespace, ids = sessions[session][turn]
        choice = router.choose([w.candidate for w in workers], ids, namespace)
        predicted += choice.matched_tokens
        best += choice.best_tokens
        worker = by_id[choice.worker_id]
        worker.account(now)
        load = choice.cost_tokens + max_tokens
        worker.candidate.num_requests += 1
        worker.candidate.num_tokens += load
        rid = len(requests)
        requests.append((session, turn, choice.worker_id, choice.matched_tokens, load))
        sent.append((namespace, ids))
        worker.queue.append(rid)
        if not worker.busy:
            start(worker)

    batches: list[tuple[str, list[int], list[Any]]] = []  # (worker id, requests, their locked nodes)

    def start(worker: SimWorker) -> None:
        """The engine's next prefill batch: waiting requests, longest cached prefix first (its default
        "lpm" schedule), while their prompts fit in the pool; each is matched when admitted, inserted and
        locked while it runs (least recently used unlocked leaves go to make room)."""
        nonlocal served, prompt_total, mispredicted
        cache = worker.cache
        waiting = sorted(worker.queue, key=lambda r: -cached_prefix(cache, prompt_of(r)[1][:-1], prompt_of(r)[0]))
        admitted: list[int] = []
        locked: list[Any] = []
        tokens = 0
        service = DECODE_TOKENS * max_tokens
        for rid in waiting:
            namespace, ids = prompt_of(rid)
            if admitted and tokens + len(ids) > worker.capacity:
                break
            tokens += len(ids)
            worker.queue.remove(rid)
            admitted.append(rid)
            hit = len(cache.match_prefix(ids[:-1], namespace)[0])  # the engine computes at least the last token
            served += hit
            prompt_total += len(ids)
            mispredicted += requests[rid][3] >= BLOCK_TOKENS and hit == 0
            cache.insert(ids, range(len(ids)), namespace)
            node = cache.match_prefix(ids, namespace)[1]
            cache.inc_lock_ref(node)
            locked.append(node)
            excess = cache.evictable_size + cache.protected_size - worker.capacity
            if excess > 0:
                cache.evict(excess)
            service += OVERHEAD_TOKENS + len(ids) - hit
        worker.busy = True
        batches.append((worker.candidate.worker_id, admitted, locked))
        heapq.heappush(events_heap, (now + service, next(seq), "done", len(batches) - 1))

    def prompt_of(rid: int) -> tuple[str, list[int]]:
        return sessions[requests[rid][0]][requests[rid][1]]

    def next_session() -> None:
        if todo:
            heapq.heappush(events_heap, (now, next(seq), "send", todo.popleft() * 1_000_000))

    for _ in range(concurrency):
        next_session()
    while events_heap:
        now, _, kind, value = heapq.heappop(events_heap)
        if kind == "send":
            send(value // 1_000_000, value % 1_000_000)
            continue
        worker_id, admitted, locked = batches[value]
        worker = by_id[worker_id]
        worker.account(now)
        for node in locked:
            worker.cache.dec_lock_ref(node)
        worker.busy = False
        for rid in admitted:
            session, turn, _, _, load = requests[rid]
            worker.candidate.num_requests -= 1
            worker.candidate.num_tokens -= load
            if turn + 1 < len(sessions[session]):
                heapq.heappush(events_heap, (now, next(seq), "send", session * 1_000_000 + turn + 1))
            else:
                next_session()
        if worker.queue:
            start(worker)
    ideal, bound = lru_reference(sent, pool_tokens * num_workers), belady_bound(sent, pool_tokens * num_workers)
    averages = [w.inflight_area / now if now else 0.0 for w in workers]
    mean = sum(averages) / len(averages)
    name = policy + ("+events" if events else "")
    return SimResult(
        name,
        served / prompt_total if prompt_total else 0.0,
        ideal,
        len(requests) / now * 1e6 if now else 0.0,
        max(averages) / mean if mean else float("nan"),
        mispredicted,
        len(requests),
        predicted,
        best,
        bound,
    )


def print_sim_table(results: Sequence[SimResult], title: str) -> None:
    print(f"\n{title} (simulated: LRU radix caches, modelled time)")
    header = (
        f"{'policy':<20} {'hit':>6} {'Belady':>6} {'LRU ref':>7} {'hit/Belady':>10} {'req/s*':>7} "
        f"{'inflight max/mean':>17} {'mispredicted':>12}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.policy:<20} {r.hit_rate:>6.3f} {r.bound:>6.3f} {r.ideal:>7.3f} {r.vs_bound:>10.3f} {r.rps:>7.1f} "
            f"{r.balance:>17.3f} "
            f"{r.mispredicted_rate:>11.1%}"
        )
    print_vs_round_robin(results, "modelled req/s")
    print("req/s*: requests per million modelled token-times (prefill + fixed costs), for ratios only")
    print("Belady: the optimum of one cache of the summed pools (an upper bound); LRU ref: one LRU of that size")


def run_simulation(args: argparse.Namespace, tokenizer: Any, workload: Workload, policies: Sequence[str]) -> int:
    """`--simulate`: every policy (cache_aware also with events per `--kv-events`) on the workload, then,
    with `--sim-seeds N`, the mean over N seeds."""
    modes = {"off": (False,), "on": (True,), "both": (False, True)}[args.kv_events]
    runs = [(p, e) for p in policies for e in (modes if p == "cache_aware" else (False,))]

    def one(w: Workload) -> list[SimResult]:
        sessions = w.by_session()
        return [
            simulate(sessions, p, args.workers, w.pool, args.concurrency, events=e, max_tokens=args.max_tokens)
            for p, e in runs
        ]

    results = one(workload)
    title = f"{args.workers} workers{' (skew)' if args.skew else ''}, seed {args.seed}"
    print_sim_table(results, title)
    if args.sim_seeds > 1:
        per_seed = [results] + [one(build_workload(args, tokenizer, args.seed + k)) for k in range(1, args.sim_seeds)]
        means = []
        for i, first in enumerate(results):
            rows = [seed_results[i] for seed_results in per_seed]
            means.append(
                SimResult(
                    first.policy,
                    statistics.mean(r.hit_rate for r in rows),
                    statistics.mean(r.ideal for r in rows),
                    statistics.mean(r.rps for r in rows),
                    statistics.mean(r.balance for r in rows),
                    sum(r.num_mispredicted for r in rows),
                    sum(r.num_requests for r in rows),
                    bound=statistics.mean(r.bound for r in rows),
                )
            )
            spread = [round(r.hit_rate, 3) for r in rows]
            print(f"  {first.policy}: hit per seed {spread}")
        print_sim_table(means, f"{args.workers} workers, mean of seeds {args.seed}..{args.seed + args.sim_seeds - 1}")
    return 0
