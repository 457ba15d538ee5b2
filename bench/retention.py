"""`radixgate bench retention`: what keeping the right prefixes buys, in three parts.

- `priority`: the engine in-process (the tiny model) under overload (more requests than running
  slots, all arriving at once): high- vs low-priority TTFT p50, priority scheduling on and off.
- `pins`: a 1h-pinned prefix asked for again after each burst of unrelated traffic twice the
  pool's size: how often it is a hit, pinned and not; then the same after its TTL ran out (an
  injected clock), and the per-tenant cap with two tenants.
- `noisy-neighbour`: tenant A cycles a small working set, tenant B floods unique long prompts at
  4x the pool per A cycle: A's hit rate alone, with fair share off, and with it on.

The pin and noisy-neighbour parts drive the engine's own scheduler and cache manager (admission,
prefix match, allocation, insertion, pins, fair-share eviction) with the model's forward pass left
out: they measure what stays cached, which no forward pass changes, at sizes the tiny model on a
CPU could not prefill in a bench's time. `--live` runs the noisy-neighbour part against real
`radixgate serve` processes instead, at small sizes (bench/retention_live.py).
- `template`: template-aware eviction (lru with a credit from each template's measured reuse)
  against lru and slru on the router bench's presets, in simulation (bench/retention_template.py).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections.abc import Sequence

from radixgate.engine.config import EngineConfig
from radixgate.engine.kvcache.slot_table import SlotTable
from radixgate.engine.protocol import SamplingParams
from radixgate.engine.scheduler.cache_manager import CacheManager
from radixgate.engine.scheduler.request import Req
from radixgate.engine.scheduler.scheduler import Scheduler

PARTS = ("priority", "pins", "noisy-neighbour", "template")
CONTEXT = 8192


class CacheSim:
    """The engine's scheduler and cache manager, each request prefilled and ended after its first
    token, with no model: `run` returns the request once it finished."""

    def __init__(self, capacity: int, **config: object) -> None:
        cfg = EngineConfig(max_total_tokens=capacity, max_running_requests=8, **config)  # type: ignore[arg-type]
        self.cache_manager = CacheManager.from_config(cfg, capacity, SlotTable(8, CONTEXT + 1, "cpu"), None)
        self.scheduler = Scheduler(cfg, self.cache_manager, frozenset(), CONTEXT)
        self._rids = itertools.count()

    def run(self, ids: Sequence[int], salt: str | None = None, pins: tuple[tuple[int, float], ...] = ()) -> Req:
        req = Req(f"sim-{next(self._rids)}", list(ids), SamplingParams(max_new_tokens=1, cache_pins=pins), salt)
        self.scheduler.add(req)
        while req.finish_reason is None:
            batch = self.scheduler.schedule()
            assert batch is not None, "the simulated engine stalled"
            done = {id(r): 0 for r in batch.reqs if r.num_computed + r.extend_len == r.num_tokens}
            self.scheduler.process_result(batch, done)
            for r in batch.reqs:
                if r.finish_reason is not None:
                    self.scheduler.remove(r)
        return req


def _unique(counter: itertools.count, n: int) -> list[int]:
    start = 100_000 + next(counter) * 10_000
    return list(range(start, start + n))


# ---- priority ----------------------------------------------------------------------------------
def priority_ttft(enable: bool, num_requests: int = 32, max_running: int = 4) -> tuple[float, float]:
    """(high-priority TTFT p50, low-priority TTFT p50) in seconds; every other request is high."""
    from radixgate.engine.engine import Engine

    engine = Engine(
        EngineConfig(max_total_tokens=8192, max_running_requests=max_running, enable_priority_scheduling=enable)
    )
    try:
        prompts = [[1000 + 97 * i + j for j in range(32)] for i in range(num_requests)]
        high = [i % 2 == 1 for i in range(num_requests)]
        sampling = [
            SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True, priority=int(h and enable)) for h in high
        ]
        outs = engine.generate(input_ids=prompts, sampling=sampling)
    finally:
        engine.shutdown()
    ttft = [o.times["first_token"] - o.times["arrival"] for o in outs]
    return (
        statistics.median(t for t, h in zip(ttft, high, strict=True) if h),
        statistics.median(t for t, h in zip(ttft, high, strict=True) if not h),
    )


def print_priority() -> None:
    print("priority under overload: 32 requests at once, 4 running slots, 8 tokens each, every other one priority 1")
    print(f"{'priority scheduling':<22}{'high TTFT p50 (s)':>19}{'low TTFT p50 (s)':>18}{'high / low':>12}")
    for enable in (False, True):
        high, low = priority_ttft(enable)
        print(f"{'on' if enable else 'off':<22}{high:>19.3f}{low:>18.3f}{high / low:>12.2f}")


# ---- pins --------------------------------------------------------------------------------------
def pin_hit_rate(pinned: bool, rounds: int = 100, capacity: int = 4096, prefix: int = 512) -> float:
    """Fraction of the prefix's requests after its first (which computes it, and pins it) that found
    all of it cached, with 2x the pool of unrelated traffic before each."""
    sim, counter = CacheSim(capacity), itertools.count()
    shared = _unique(counter, prefix)
    pins = ((prefix, 3600.0),) if pinned else ()
    hits = 0
    for _ in range(rounds):
        for _ in range(2 * capacity // 512):
            sim.run(_unique(counter, 512))
        req = sim.run(shared + _unique(counter, 16), pins=pins)
        hits += req.cached_tokens >= prefix
        assert req.cached_tokens or hits == 0 or not pinned, "a pinned prefix was lost"
        assert sim.cache_manager.pins is not None
        assert sim.cache_manager.pins.num_pinned_tokens <= sim.cache_manager.pins.max_pinned_tokens
    sim.cache_manager.check_idle_invariant()
    return hits / (rounds - 1)


def pin_after_expiry(capacity: int = 4096, prefix: int = 512) -> tuple[bool, bool]:
    """(a hit before the TTL ran out, a hit after it and another burst): a 60 s pin on a fake clock."""
    sim, counter, now = CacheSim(capacity), itertools.count(), [0.0]
    assert sim.cache_manager.pins is not None
    sim.cache_manager.pins.clock = lambda: now[0]
    shared = _unique(counter, prefix)
    sim.run(shared + [1], pins=((prefix, 60.0),))
    results = []
    for t in (30.0, 120.0):
        now[0] = t
        for _ in range(2 * capacity // 512):
            sim.run(_unique(counter, 512))
        results.append(sim.run(shared + _unique(counter, 8)).cached_tokens >= prefix)
    return results[0], results[1]


def tenant_cap_answer(capacity: int = 4096) -> str | None:
    """Two active tenants: the second pin of one of them goes past its half of the budget."""
    sim, counter = CacheSim(capacity), itertools.count()
    sim.run(_unique(counter, 32), salt="b")  # b is active: a gets half of the budget (512 of 1024)
    sim.run(_unique(counter, 400) + [1], salt="a", pins=((400, 3600.0),))
    return sim.run(_unique(counter, 400) + [1], salt="a", pins=((400, 3600.0),)).pin_results[0][2]  # type: ignore[index]


def print_pins() -> None:
    print("pins: a 512-token prefix, pool 4096 tokens, pin budget 0.25; 8192 unrelated tokens before each of its")
    print("100 requests; hits counted over the 99 after the first (which computes the prefix and pins it)")
    for pinned in (False, True):
        rate = 100 * pin_hit_rate(pinned)
        print(f"  {'pinned 1h' if pinned else 'not pinned':<12} hit on {rate:5.1f}% of its requests")
    before, after = pin_after_expiry()
    print(f"  60 s pin, fake clock: hit at 30 s {before}; at 120 s (expired, then a burst) {after}")
    print(f"  two tenants, a's second 400-token pin: {tenant_cap_answer()!r}")


# ---- noisy neighbour ---------------------------------------------------------------------------
def noisy_neighbour(fairness: bool, with_b: bool, cycles: int = 20, capacity: int = 4096) -> float:
    """Tenant A's hit rate: 8 prompts of 128 tokens cycled; per A request, B sends 4 unique
    512-token prompts (4x the pool per A cycle)."""
    sim, counter = CacheSim(capacity, tenant_cache_fairness=fairness), itertools.count()
    working_set = [_unique(counter, 128) for _ in range(8)]
    queried = hits = 0
    for _ in range(cycles):
        for prompt in working_set:
            req = sim.run(prompt + _unique(counter, 4), salt="a")
            queried, hits = queried + len(req.origin_input_ids), hits + req.cached_tokens
            for _ in range(4 if with_b else 0):
                sim.run(_unique(counter, 512), salt="b")
    sim.cache_manager.check_idle_invariant()
    return hits / queried


def print_noisy_neighbour() -> None:
    print("noisy neighbour: pool 4096 tokens; A cycles 8 x 128 tokens, B floods 4 x 512 unique tokens per A request")
    alone = noisy_neighbour(fairness=False, with_b=False)
    off = noisy_neighbour(fairness=False, with_b=True)
    on = noisy_neighbour(fairness=True, with_b=True)
    print(f"{'run':<28}{'A hit rate':>12}{'vs alone':>10}")
    for name, rate in (("A alone", alone), ("A + B, fair share off", off), ("A + B, fair share on", on)):
        print(f"{name:<28}{rate:>12.3f}{rate - alone:>+10.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixgate bench retention", description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=PARTS, action="append", help="run only these parts (default: all)")
    parser.add_argument(
        "--live",
        action="store_true",
        help="noisy-neighbour or template against real `radixgate serve` processes (the tiny model; minutes) "
        "instead of the simulation",
    )
    parser.add_argument(
        "--presets", default=None, help="with --live --part template: comma-separated REPORTING presets (default all)"
    )
    parser.add_argument(
        "--live-pool", type=int, default=None, help="with --live: each server's --max-total-tokens (default 2048)"
    )
    args = parser.parse_args(argv)
    if args.live_pool is not None and not args.live:
        parser.error("--live-pool goes with --live")
    if args.presets is not None and not (args.live and args.part == ["template"]):
        parser.error("--presets goes with --live --part template")
    if args.live and args.part == ["template"]:
        if args.live_pool is not None:
            parser.error("--live-pool is the noisy neighbour's; the template part uses each preset's pool")
        from radixgate.bench.retention_template_live import print_template_live

        print_template_live(args.presets.split(",") if args.presets else None)
        return 0
    if args.live:
        if args.part not in (None, ["noisy-neighbour"]):
            parser.error("--live runs one part: give --part noisy-neighbour (the default) or --part template")
        from radixgate.bench.retention_live import LiveSizes, print_noisy_neighbour_live

        print_noisy_neighbour_live(LiveSizes() if args.live_pool is None else LiveSizes(pool=args.live_pool))
        return 0
    for part in args.part or PARTS:
        if part == "template":  # a study on the router bench's presets (bench/retention_template.py)
            from radixgate.bench.retention_template import print_template_study

            print_template_study()
        else:
            {"priority": print_priority, "pins": print_pins, "noisy-neighbour": print_noisy_neighbour}[part]()
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
