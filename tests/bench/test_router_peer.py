"""`bench router --preset` live rows: each router process's CPU per answered request, measured from
outside the process, and printed beside req/s (the simulated rows have none)."""

from __future__ import annotations

import os
import time

import pytest

from radixgate.bench.router_peer import Row, _cpu_s, print_rows
from radixgate.bench.router_presets import PRESETS


def test_a_process_cpu_time_grows_with_its_work() -> None:
    before, start = _cpu_s(os.getpid()), time.process_time()
    while time.process_time() < start + 0.1:
        pass
    spent = time.process_time() - start
    # The same counters process_time reads, in 10 ms ticks: each end may round down by one tick
    # (a 0.05 s loop once read 0.0399999 in float arithmetic, just under a 0.04 bound).
    assert _cpu_s(os.getpid()) - before >= spent - 0.025


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


def test_tagged_runs_each_get_fresh_workers_and_untagged_ones_share_them(monkeypatch) -> None:
    """A worker's own gateway keeps the template statistics of tagged requests that reached it (behind
    SGLang's router): tagged, no run may inherit them, so each run starts its workers afresh."""
    import argparse
    from types import SimpleNamespace

    import radixgate.gateway.server_process as server_process
    from radixgate.bench import router_peer

    started: list[list[str]] = []

    class Process:
        def __init__(self, args, env=None) -> None:
            self.args, self.process, self.base_url = list(args), None, ""

        def start(self):
            started.append(self.args)
            self.process, self.base_url = SimpleNamespace(pid=os.getpid()), f"http://127.0.0.1:{len(started)}"
            return self

        def stop(self) -> None:
            self.process = None

        __enter__ = start

        def __exit__(self, *exc) -> None:
            self.stop()

    async def drive(*args, **kwargs):
        return [0], [(100, 60, None)], 1.0

    monkeypatch.setattr(server_process, "ServerProcess", Process)
    monkeypatch.setattr(router_peer, "SglRouter", lambda urls, log: Process(["sgl-router", *urls]))
    monkeypatch.setattr(router_peer, "_drive", drive)
    monkeypatch.setattr(router_peer, "_flush", lambda urls: None)
    monkeypatch.setattr(router_peer, "_warm_up", lambda *args: None)
    preset = PRESETS["heldout-16x12"]
    workload = SimpleNamespace(sessions=[[[{"role": "user", "content": "hi"}]]], arrivals=[0.0])
    for tagged, worker_starts in ((True, 4), (False, 1)):
        started.clear()
        args = argparse.Namespace(
            tagged=tagged,
            rounds=2,
            routers={"radixgate (KV events)", "sgl-router"},
            against="sglang-router",
            worker_eviction_policy="template",
            sgl_log="unused",
        )
        rows = router_peer.run_live(preset, workload, [[1, 2, 3]], 7000, args)
        assert [r.router for r in rows] == ["radixgate (KV events)", "sgl-router"] * 2
        workers = [a for a in started if "--max-total-tokens" in a]
        assert len(workers) == worker_starts * preset.workers, (tagged, started)
