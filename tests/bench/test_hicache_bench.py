"""The HiCache benchmark command runs and its tiers rank as they should (a small workload)."""

from __future__ import annotations

import json

import pytest

from radixgate.bench.hicache import main

pytestmark = pytest.mark.slow  # runs the benchmark command


def test_bench_prints_the_three_configurations(capsys):
    assert main(["--conversations", "3", "--turns", "3", "--device-tokens", "768", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    r = report["results"]
    assert list(r) == ["device", "device+host", "device+host+disk"]
    assert r["device+host+disk"]["hit_tokens"]["disk"] > 0
    assert r["device"]["hit_rate"] <= r["device+host"]["hit_rate"] <= r["device+host+disk"]["hit_rate"]
