"""The live noisy-neighbour bench's workload, at toy size, against in-process gateways over real tiny
engines (no server process): with fair share off tenant B's flood takes A's working set, with it on
A keeps what it has alone. The bench itself (`--live`) runs the same `drive` against `radixgate serve`."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from radixgate.bench.retention import main
from radixgate.bench.retention_live import KEYS, LiveSizes, drive, server_args
from radixgate.engine import EngineConfig
from radixgate.gateway.app import create_app
from radixgate.gateway.cli import build_parser, engine_config
from radixgate.gateway.config import GatewayConfig

TOY = LiveSizes(pool=512, a_prompts=2, a_shared=32, a_own=4, b_tokens=64, b_factor=4, b_in_flight=2, cycles=3)


def _a_hit_rate(fairness: bool, with_b: bool) -> float:
    engine = EngineConfig(max_total_tokens=TOY.pool, page_size=TOY.page, tenant_cache_fairness=fairness)
    config = GatewayConfig(api_keys={KEYS["a"]: "a", KEYS["b"]: "b"}, engine=engine)
    with TestClient(create_app(config)) as client:
        rate, counted, b_sent = drive(client, TOY, with_b)
    assert counted == TOY.a_prompts * (TOY.cycles - 1)
    assert b_sent == (TOY.b_factor * TOY.pool * TOY.cycles if with_b else 0)
    return rate


def test_the_live_workload_shows_the_loss_and_the_fix() -> None:
    alone = _a_hit_rate(fairness=False, with_b=False)
    off = _a_hit_rate(fairness=False, with_b=True)
    on = _a_hit_rate(fairness=True, with_b=True)
    assert alone == pytest.approx(32 / 36)  # every A request after the first cycle: its 2 shared pages
    assert off < alone - 0.3 and abs(on - alone) <= 0.10


def test_each_way_starts_a_server_with_the_flags_it_names(tmp_path) -> None:
    keys = tmp_path / "keys.txt"
    for fairness, expected in (("on", True), ("off", False)):
        args = build_parser().parse_args(server_args(TOY, keys, fairness))
        assert engine_config(args).tenant_cache_fairness is expected
        assert args.max_total_tokens == TOY.pool and args.page_size == TOY.page and args.api_keys_file == str(keys)


def test_live_runs_the_noisy_neighbour_part_only(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--part", "pins", "--live"])
    assert "--live runs the noisy-neighbour part only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--live-pool", "1024"])
    assert "--live-pool goes with --live" in capsys.readouterr().err
