"""The HiCache benchmark command runs and its tiers rank as they should (a small workload): two
workers without session affinity, the remote column on a redis-server the benchmark starts."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from radixgate.bench.hicache import main

pytestmark = pytest.mark.slow  # runs the benchmark command


def test_bench_prints_the_four_configurations(capsys):
    if shutil.which("redis-server") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("redis-server is not installed (make redis): on CI the remote column must run")
        pytest.skip("redis-server is not installed (make redis)")
    argv = ["--conversations", "2", "--turns", "3", "--device-tokens", "768", "--shared-prefix-tokens", "0", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    r = report["results"]
    assert list(r) == ["device", "device+host", "device+host+disk", "device+host+disk+remote"]
    assert r["device+host+disk+remote"]["hit_tokens"]["remote"] > 0
    assert r["device"]["hit_rate"] <= r["device+host"]["hit_rate"] <= r["device+host+disk"]["hit_rate"]
    assert r["device+host+disk+remote"]["hit_rate"] > r["device+host+disk"]["hit_rate"]
