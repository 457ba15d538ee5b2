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


# `--live-pool 1024` at toy size: B's two prompts in flight (128 tokens) are its whole share of the pool
SMALL_POOL = LiveSizes(pool=256, a_prompts=2, a_shared=32, a_own=4, b_tokens=64, b_factor=4, b_in_flight=2, cycles=3)


def _a_hit_rate(fairness: bool, with_b: bool, sizes: LiveSizes = TOY) -> float:
    engine = EngineConfig(max_total_tokens=sizes.pool, page_size=sizes.page, tenant_cache_fairness=fairness)
    config = GatewayConfig(api_keys={KEYS["a"]: "a", KEYS["b"]: "b"}, engine=engine)
    with TestClient(create_app(config)) as client:
        rate, counted, b_sent = drive(client, sizes, with_b)
    assert counted == sizes.a_prompts * (sizes.cycles - 1)
    assert b_sent == (sizes.b_factor * sizes.pool * sizes.cycles if with_b else 0)
    return rate


def test_the_live_workload_shows_the_loss_and_the_fix() -> None:
    alone = _a_hit_rate(fairness=False, with_b=False)
    off = _a_hit_rate(fairness=False, with_b=True)
    on = _a_hit_rate(fairness=True, with_b=True)
    assert alone == pytest.approx(32 / 36)  # every A request after the first cycle: its 2 shared pages
    assert off < alone - 0.3 and abs(on - alone) <= 0.10


def test_a_neighbour_whose_requests_in_flight_fill_its_share_evicts_its_own_prompts() -> None:
    """Its pages in flight and those it is about to allocate count toward B's share, so B's next
    prompt takes B's own cached ones and A keeps its hit rate alone (0.0 when only what B had in
    the tree counted)."""
    assert _a_hit_rate(fairness=True, with_b=True, sizes=SMALL_POOL) == pytest.approx(32 / 36)


def test_each_way_starts_a_server_with_the_flags_it_names(tmp_path) -> None:
    keys = tmp_path / "keys.txt"
    for fairness, expected in (("on", True), ("off", False)):
        args = build_parser().parse_args(server_args(TOY, keys, fairness))
        assert engine_config(args).tenant_cache_fairness is expected
        assert args.max_total_tokens == TOY.pool and args.page_size == TOY.page and args.api_keys_file == str(keys)


def test_live_runs_the_noisy_neighbour_or_the_template_part(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--part", "pins", "--live"])
    assert "--live runs one part" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--part", "template", "--presets", "heldout-16x12"])
    assert "--presets goes with --live --part template" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--part", "template", "--live", "--live-pool", "1024"])
    assert "--live-pool is the noisy neighbour's" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="not a REPORTING preset"):
        main(["--part", "template", "--live", "--presets", "tune-rag"])
    with pytest.raises(SystemExit):
        main(["--live-pool", "1024"])
    assert "--live-pool goes with --live" in capsys.readouterr().err
