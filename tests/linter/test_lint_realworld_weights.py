"""Weighted recall of `bench lint-realworld` (`weights`) on hand-computed numbers, and the committed strata."""

from __future__ import annotations

import json
import math

import pytest

from radixgate.bench.lint_realworld import DATA, read_jsonl, read_pools, score, weights
from radixgate.bench.lint_realworld_strata import in_keys


def _label(line: int, kind: str, verdict: str, **extra: object) -> dict:
    lab = {"repo": "o/r", "path": "a.py", "line": line, "end_line": line, "kind": kind, "verdict": verdict}
    return {**lab, "refs": [], **extra}


def _finding(line: int) -> dict:
    return {"repo": "o/r", "path": "a.py", "line": line, "code": "KV101"}


def test_sampled_unflagged_breakers_weigh_pool_over_sample_and_the_census_one() -> None:
    # Census of findings: 2 breakers (both caught) and 1 ok; 4 of 40 unflagged sites sampled (weight 10 each),
    # 1 of them a breaker that no finding catches.
    labels = [
        _label(1, "finding", "breaker"),
        _label(2, "finding", "breaker"),
        _label(3, "finding", "ok"),
        *(_label(10 + i, "site", "breaker" if i == 0 else "ok", batch=9, sample6=i) for i in range(4)),
    ]
    pools = [{"batch": 9, "split": "test", "keys": ["sample6"], "pool": 40}]
    weight = weights(labels, pools, {"o/r": "test"})
    assert [weight[id(lab)] for lab in labels] == [1.0, 1.0, 1.0, 10.0, 10.0, 10.0, 10.0]
    # The same labels in batch 1 (no field) match nothing: each weighs one.
    assert set(weights(labels, pools, {"o/r": "dev"}).values()) == {1.0}
    row, _ = score("t", ["o/r"], 1, [_finding(1), _finding(2), _finding(3)], labels, weight)
    assert (row.tp, row.fp, row.breakers, row.caught) == (2, 1, 3, 2)
    assert row.recall == pytest.approx(2 / 3)
    assert row.weighted_recall == pytest.approx(2 / 12)  # (1 + 1) / (1 + 1 + 10)
    # A breaker of the sample caught by a finding counts with its weight on both sides.
    row, _ = score("t", ["o/r"], 1, [_finding(1), _finding(10)], labels, weight)
    assert row.weighted_recall == pytest.approx(11 / 12)
    # Only the sampled sites the pool script also enumerates (here all but the breaker at line 10): those 3
    # stand for the pool of 40, the other weighs nothing.
    in_pool = {id(lab) for lab in labels if lab["line"] != 10}
    weight = weights(labels, pools, {"o/r": "test"}, in_pool)
    assert [weight[id(lab)] for lab in labels[3:]] == [0.0, *[pytest.approx(40 / 3)] * 3]
    row, _ = score("t", ["o/r"], 1, [_finding(1)], labels, weight)
    assert row.weighted_recall == pytest.approx(1 / 2)


def test_post_stratified_members_and_a_labels_own_pool() -> None:
    # A sample of every site (`sample`): index 0 was unflagged at the rules of the time and shares its stratum
    # (pool 9) with a census of the rest (`sample5b`, 2 labels); index 1 was flagged (stratum pool 6, alone).
    labels = [
        _label(1, "site", "breaker", sample=0),
        _label(2, "site", "breaker", sample=1),
        _label(3, "site", "ok", sample5b=0),
        _label(4, "site", "ok", sample5b=1),
        _label(5, "site", "breaker", batch=3, sample3=0, pool=50),  # batch 3 records its pool on the label
        _label(6, "site", "ok", batch=3, sample3=1, pool=50),
    ]
    pools = [
        {"batch": 1, "split": "dev", "keys": ["sample5b"], "members": [["sample", 0]], "pool": 9},
        {"batch": 1, "split": "dev", "keys": [], "members": [["sample", 1]], "pool": 6},
    ]
    weight = weights(labels, pools, {"o/r": "dev"})
    assert [weight[id(lab)] for lab in labels] == [3.0, 6.0, 3.0, 3.0, 25.0, 25.0]
    row, _ = score("t", ["o/r"], 1, [_finding(2)], labels[:4], weight)
    assert row.weighted_recall == pytest.approx(6 / 9)
    assert math.isnan(score("t", [], 0, [], [], {})[0].weighted_recall)


def test_committed_strata_cover_every_sampled_site_once() -> None:
    """Each sampled site label of batches 1-3 falls in exactly one row of pools.jsonl, whose `sampled` is the
    number of its labels, and no stratum is sampled beyond its pool."""
    pools = read_pools()
    split = {row["repo"]: row["split"] for row in read_jsonl(DATA / "provenance.jsonl")}
    split |= {row["repo"]: row["split"] for row in read_jsonl(DATA / "batch3.jsonl")}
    counts = [0] * len(pools)
    for half in ("test", "dev"):
        for lab in read_jsonl(DATA / f"labels_{half}.jsonl"):
            assert split[lab["repo"]] == half
            rows = [
                i
                for i, row in enumerate(pools)
                if row["batch"] == lab.get("batch", 1)
                and row["split"] == half
                and (in_keys(lab, row["keys"]) or any([k, lab.get(k)] in row.get("members", []) for k in lab))
            ]
            assert len(rows) == (lab["kind"] == "site"), json.dumps(lab)[:200]
            for i in rows:
                counts[i] += 1
    assert counts == [row["sampled"] for row in pools]
    assert all(row["sampled"] <= row["pool"] <= row["sites"] for row in pools)
