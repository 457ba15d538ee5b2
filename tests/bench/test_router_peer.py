"""`bench router --preset` live rows: each router process's CPU per answered request, measured from
outside the process, and printed beside req/s (the simulated rows have none)."""

from __future__ import annotations

import os
import time

import pytest

from radixgate.bench.router_peer import Row, _cpu_s, print_rows
from radixgate.bench.router_presets import PRESETS


def test_a_process_cpu_time_grows_with_its_work() -> None:
    before = _cpu_s(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert _cpu_s(os.getpid()) - before >= 0.04  # the same counters process_time reads, in 10 ms ticks


def test_live_rows_print_their_routers_cpu_and_simulated_ones_none(capsys: pytest.CaptureFixture[str]) -> None:
    preset = PRESETS["heldout-16x12"]
    live = [Row("radixgate (KV events)", 0.7, 10.0, 0.86, 0.73, 192, 0, cpu_ms=8.25)]
    live.append(Row("sgl-router", 0.68, 12.0, 0.86, 0.73, 192, 0, cpu_ms=0.91))
    print_rows(preset, 100, 7000, 192, live)
    out = capsys.readouterr().out
    assert "CPU ms/req" in out and "      8.25" in out and "      0.91" in out
    print_rows(preset, 100, 7000, 192, [Row("round_robin", 0.5, 1.0, 0.86, 0.73, 192, 0, modelled=True)])
    assert "CPU ms/req" not in capsys.readouterr().out


def test_tagged_requests_carry_the_sdks_tags_and_simulate_refuses_the_live_only_flags(capsys) -> None:
    from radixgate.bench.router_peer import _tags, main

    turn = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
    metadata = _tags(turn)["metadata"]
    assert metadata["static_prefix_chars"] == str(len("You are terse."))
    assert metadata == _tags([turn[0], {"role": "user", "content": "other"}])["metadata"]  # one template
    assert metadata["prompt_template"] != _tags([{"role": "system", "content": "x"}])["metadata"]["prompt_template"]
    for flags in (["--tagged"], ["--worker-eviction-policy", "template"]):
        with pytest.raises(SystemExit):
            main(["--preset", "heldout-16x12", "--simulate", *flags])
        assert "for live runs" in capsys.readouterr().err
