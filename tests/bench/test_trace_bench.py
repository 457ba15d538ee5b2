"""`radixgate bench trace`: the references (infinite cache, Belady) against brute force and hand
counts, the references' module kept apart from the engine, and the replay of a real Mooncake
excerpt through RadixCache under every policy, bounded by both references."""

from __future__ import annotations

import ast
import itertools
import json
import random
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from radixgate.bench import cache_bounds, trace
from radixgate.bench.cache_bounds import TraceRequest, belady_hits, infinite_hits, load_trace, split_by_time
from radixgate.engine.kvcache.eviction import EVICTION_POLICIES

ROOT = Path(__file__).resolve().parents[2]
EXCERPT = Path(__file__).parent / "data" / "mooncake_conversation_head300.jsonl"


def _requests(*blocks: list[int]) -> list[TraceRequest]:
    return [TraceRequest(i, 512 * len(b), 1, tuple(b)) for i, b in enumerate(blocks)]


def test_the_references_import_nothing_of_the_engine():
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(ast.parse((ROOT / "bench" / "cache_bounds.py").read_text()))
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in getattr(n, "names", [])
    ]
    assert imported and not [m for m in imported if m and ("engine" in m or m.startswith("."))]
    probe = "import sys, radixgate.bench.cache_bounds; print([m for m in sys.modules if 'engine' in m or m == 'torch'])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_hand_counted_trace():
    # blocks 1,2 twice, a one-off 3, then 1,2 again; a pool of 2 blocks
    reqs = _requests([1, 2], [1, 2], [3], [1, 2])
    counted = [True] * 4
    assert infinite_hits(reqs, counted) == (4, 7)
    assert belady_hits(reqs, counted, 2) == (4, 7)  # bypasses the one-off
    assert trace.replay(reqs, counted, "lru", 2) == (2, 7)  # the one-off pushes the pair out
    assert belady_hits(reqs, [False, False, False, True], 2) == (2, 2)
    assert infinite_hits(reqs, [True, False, True, False]) == (0, 3)


def _brute_force_best(refs: list[tuple[int, bool]], capacity: int) -> int:
    """The most counted hits any admit-on-reference, bypass-allowed cache of `capacity` gets."""

    @cache
    def best(i: int, cached: frozenset[int]) -> int:
        if i == len(refs):
            return 0
        block, count = refs[i]
        if block in cached:
            return count + best(i + 1, cached)
        options = [best(i + 1, cached)]  # bypass
        if len(cached) < capacity:
            options.append(best(i + 1, cached | {block}))
        else:
            options += [best(i + 1, (cached - {old}) | {block}) for old in cached]
        return max(options)

    return best(0, frozenset())


def test_belady_is_the_optimum_on_small_traces():
    rng = random.Random(5)
    for _ in range(150):
        reqs = _requests(*[[rng.randrange(5)] for _ in range(rng.randrange(1, 11))])
        counted = [rng.random() < 0.7 for _ in reqs]
        capacity = rng.randrange(0, 4)
        refs = [(r.hash_ids[0], c) for r, c in zip(reqs, counted, strict=True)]
        assert belady_hits(reqs, counted, capacity) == (_brute_force_best(refs, capacity), sum(counted))


def test_every_policy_stays_within_the_references_on_a_real_excerpt():
    reqs = load_trace(EXCERPT)
    assert len(reqs) == 300
    distinct = cache_bounds.distinct_blocks(reqs)
    for part in split_by_time(reqs):
        inf_hits, total = infinite_hits(reqs, part)
        assert 0 < total < sum(len(r.hash_ids) for r in reqs)
        for fraction, policy in itertools.product((0.1, 0.5), EVICTION_POLICIES):
            pool = int(distinct * fraction)
            hits, counted = trace.replay(reqs, part, policy, pool)
            belady, _ = belady_hits(reqs, part, pool)
            assert counted == total and hits <= belady <= inf_hits, (policy, fraction)
    big = int(distinct * 1.0)
    everything = [True] * len(reqs)
    assert trace.replay(reqs, everything, "lru", big)[0] == infinite_hits(reqs, everything)[0]  # never evicts


def test_the_command_prints_every_policy_beside_the_references(capsys):
    argv = ["--trace", str(EXCERPT), "--simulate", "--pool-fractions", "0.25", "--part", "second", "--json"]
    assert trace.main([*argv, "--policies", "lru,lfu,slru"]) == 0
    result = json.loads(capsys.readouterr().out)["traces"][str(EXCERPT)]
    assert result["scale"] == 32 and result["part"] == "second" and 0 < result["counted_requests"] < 300
    (row,) = result["rows"]
    assert set(row["hit_rate"]) == {"lru", "lfu", "slru"}
    assert all(0 <= r <= row["belady"] <= result["infinite"] <= 1 for r in row["hit_rate"].values())
    assert trace.main(["--trace", str(EXCERPT), "--simulate", "--pool-fractions", "0.25", "--policies", "lru"]) == 0
    table = capsys.readouterr().out
    assert "belady*" in table and "infinite" in table and "scaled down 32x" in table


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trace", "x.jsonl", "--simulate", "--policies", "lru,lfru"], "'lfru' is not one of lru, lfu"),
        (["--trace", str(EXCERPT)], "one of --simulate (RadixCache alone) and --url URL"),
        (["--trace", str(EXCERPT), "--simulate", "--url", "http://127.0.0.1:9"], "one of --simulate"),
        (["--trace", "/nonexistent.jsonl", "--simulate"], "--trace: "),
        (["--trace", str(EXCERPT), "--simulate", "--pool-fractions", "0"], "(0, 1]"),
    ],
)
def test_bad_arguments_say_what_to_fix(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        trace.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_fair_share_on_one_tenant_changes_no_hit_on_the_excerpt(capsys):
    """The trace is one tenant: with fair share on (the engine's default) every policy hits what it hits off."""
    reqs = load_trace(EXCERPT)
    _, second = split_by_time(reqs)
    pool = int(cache_bounds.distinct_blocks(reqs) * 0.1)
    for policy in EVICTION_POLICIES:
        assert trace.replay(reqs, second, policy, pool, fair=True) == trace.replay(reqs, second, policy, pool), policy
    argv = ["--trace", str(EXCERPT), "--simulate", "--pool-fractions", "0.1", "--policies", "lru", "--json"]
    for setting in ("on", "off"):
        assert trace.main([*argv, "--tenant-cache-fairness", setting]) == 0
        assert json.loads(capsys.readouterr().out)["traces"][str(EXCERPT)]["tenant_cache_fairness"] is (setting == "on")


def test_quarters_split_the_span_by_time_and_tile_the_trace(capsys):
    """q1..q4 are the quarters of the time span: each request in exactly one, q1+q2 is the first
    half, and the command counts only the chosen quarter."""
    reqs = _requests(*[[i] for i in range(9)])  # timestamps 0..8: quarters of width 2
    quarters = [cache_bounds.counted_part(reqs, f"q{k}") for k in range(1, 5)]
    assert [sum(q) for q in quarters] == [2, 2, 2, 3]  # the last request, at the span's end, is in q4
    assert all(sum(column) == 1 for column in zip(*quarters, strict=True))
    first, second = split_by_time(reqs)
    assert [a or b for a, b in zip(quarters[0], quarters[1], strict=True)] == first
    assert [a or b for a, b in zip(quarters[2], quarters[3], strict=True)] == second
    with pytest.raises(ValueError, match="q5"):
        cache_bounds.counted_part(reqs, "q5")
    real = load_trace(EXCERPT)
    argv = ["--trace", str(EXCERPT), "--simulate", "--pool-fractions", "0.25", "--policies", "lru", "--json"]
    counts = {}
    for part in ("q1", "q2", "first"):
        assert trace.main([*argv, "--part", part]) == 0
        counts[part] = json.loads(capsys.readouterr().out)["traces"][str(EXCERPT)]["counted_requests"]
    assert counts["q1"] == sum(cache_bounds.counted_part(real, "q1")) > 0
    assert counts["q1"] + counts["q2"] == counts["first"]
