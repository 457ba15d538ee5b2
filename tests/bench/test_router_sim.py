"""`radixgate bench router --simulate`: the router over simulated LRU radix caches, no servers."""

from __future__ import annotations

import random

from radixgate.bench.router_sim import CacheView, cached_prefix, simulate
from radixgate.engine.kvcache.radix_cache import RadixCache


def _sessions(num_sessions: int = 24, turns: int = 4, templates: int = 8, seed: int = 0) -> list:
    """Sessions of token ids: a 320-token template of one of two tenants, then 24 new tokens a turn."""
    rng = random.Random(seed)
    prefixes = [[10_000 * (t + 1) + i for i in range(320)] for t in range(templates)]
    sessions = []
    for s in range(num_sessions):
        t = rng.randrange(templates)
        ids = list(prefixes[t])
        session = []
        for turn in range(turns):
            ids = ids + [1_000_000 + 1000 * s + 24 * turn + i for i in range(24)]
            session.append((f"tenant-{t % 2}", ids))
        sessions.append(session)
    return sessions


def test_cached_prefix_peeks_without_touching_the_lru_order() -> None:
    cache = RadixCache(1, lambda slots: None)
    cache.insert(list(range(40)), range(40), "t")
    cache.insert(list(range(100, 140)), range(40), "t")
    assert cached_prefix(cache, list(range(20)) + [7], "t") == 20
    assert cached_prefix(cache, list(range(40)), "other") == 0  # another tenant's namespace
    assert CacheView(cache).match_tokens(list(range(40)), "t") == 32  # whole 16-token blocks
    cache.evict(1)  # the oldest leaf goes: the peek above did not make it recent
    assert cached_prefix(cache, list(range(40)), "t") == 0 and cached_prefix(cache, list(range(100, 140)), "t") == 40


def test_cache_aware_beats_round_robin_and_events_predict_exactly() -> None:
    sessions = _sessions()
    pool = 1200  # per worker: under the 8 templates' 2560 tokens
    rr = simulate(sessions, "round_robin", 2, pool, 8)
    ca = simulate(sessions, "cache_aware", 2, pool, 8)
    exact = simulate(sessions, "cache_aware", 2, pool, 8, events=True)
    assert rr.num_requests == ca.num_requests == exact.num_requests == 96
    assert 0 < rr.hit_rate < ca.hit_rate <= ca.bound  # Belady over the summed pools: nothing beats it
    assert rr.hit_rate <= rr.bound and exact.hit_rate <= exact.bound
    assert ca.hit_rate > 1.2 * rr.hit_rate and ca.rps > rr.rps
    # exact at routing time; a worker may still evict the prefix before it admits the request
    assert exact.num_mispredicted <= 0.05 * exact.num_requests and exact.vs_bound > 0.9
    assert exact.predicted_tokens > 0 and exact.best_tokens >= exact.predicted_tokens


def test_a_preset_simulates_beside_its_bound_with_req_s_labelled_modelled(capsys) -> None:
    from radixgate.bench.router import main

    assert main(["--preset", "tune-single-uniform", "--simulate", "--limit", "16"]) == 0
    out = capsys.readouterr().out
    assert "tune-single-uniform (tuning, seed 0)" in out and "modelled req/s" in out and "req/s*" in out
    rows = {line[:22].strip(): line[22:].split() for line in out.splitlines() if line[:1].isalpha()}
    bound = float(rows["Belady, summed pools"][0])
    for name in ("round_robin", "least_load", "radixgate (guess)", "radixgate (KV events)"):
        assert 0 < float(rows[name][0]) <= bound  # no router beats the bound
    assert main(["--preset", "no-such-preset", "--simulate"]) == 2
