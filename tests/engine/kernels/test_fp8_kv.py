"""FP8 KV in the engine: capacity at a fixed byte budget, scales, and prefix hits that stay exact."""

from __future__ import annotations

import logging

import pytest
import torch

from radixgate.engine import Engine, EngineConfig, SamplingParams
from radixgate.engine.kvcache.kv_pool import KVPool

GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def fp8_engine():
    engine = Engine(EngineConfig(kv_cache_dtype="fp8_e4m3", max_total_tokens=4096, page_size=16))
    yield engine
    engine.shutdown()


def _server_info(engine: Engine) -> dict:
    from fastapi.testclient import TestClient

    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig
    from radixgate.gateway.workers.worker import LocalWorker

    with TestClient(create_app(GatewayConfig(), worker=LocalWorker(engine))) as client:
        response = client.get("/server_info")
        assert response.status_code == 200
        return response.json()


@pytest.mark.parametrize("dtype,ratio", [("float32", 4), ("bfloat16", 2)])
def test_fp8_pool_holds_more_tokens_at_the_same_byte_budget(dtype, ratio, monkeypatch):
    """max_total_tokens=None sizes the pool from a byte budget; FP8 stores 1 byte per value."""
    import radixgate.engine.engine as engine_module

    monkeypatch.setattr(engine_module, "_CPU_KV_BUDGET_BYTES", 64 << 20)  # a smaller CPU default, same path
    infos, pools = [], []
    for kv in ("auto", "fp8_e4m3"):
        engine = Engine(EngineConfig(dtype=dtype, kv_cache_dtype=kv, max_total_tokens=None, page_size=16))
        infos.append(_server_info(engine))
        pools.append(engine.pool.nbytes)
        engine.shutdown()
        del engine
    full, fp8 = infos
    assert full["kv_cache_dtype"] == dtype and fp8["kv_cache_dtype"] == "fp8_e4m3"
    assert fp8["max_total_num_tokens"] == ratio * full["max_total_num_tokens"]
    assert abs(pools[0] - pools[1]) <= 0.001 * pools[0]  # the same bytes, 2x / 4x the tokens


def test_prefix_hit_with_fp8_equals_cold(fp8_engine):
    shared = list(range(5000, 5040))
    a, b = shared + [11, 12, 13], shared + [21, 22]
    fp8_engine.generate(input_ids=[[7, 8, 9, 10]], sampling=GREEDY)  # scales are set by this first batch
    assert fp8_engine.flush_cache()
    cold_b = fp8_engine.generate(input_ids=[b], sampling=GREEDY)[0]
    assert cold_b.cached_tokens == 0
    assert fp8_engine.flush_cache()
    fp8_engine.generate(input_ids=[a], sampling=GREEDY)  # caches the shared 40 tokens
    warm_b = fp8_engine.generate(input_ids=[b], sampling=GREEDY)[0]
    assert warm_b.cached_tokens >= 32
    assert warm_b.token_ids == cold_b.token_ids
    again = fp8_engine.generate(input_ids=[b], sampling=GREEDY)[0]  # the whole prompt cached
    assert again.cached_tokens >= 32 and again.token_ids == cold_b.token_ids
    assert fp8_engine.pool.k_buffers[0].dtype == torch.float8_e4m3fn
    fp8_engine.check_idle_invariant()


def test_scales_calibrate_once_from_the_first_batch(fp8_engine):
    pool = fp8_engine.pool
    scales = list(pool.k_scales), list(pool.v_scales)
    assert all(s != 1.0 for s in scales[0] + scales[1])
    fp8_engine.generate(input_ids=[[3] * 30], sampling=GREEDY)
    assert (pool.k_scales, pool.v_scales) == scales


def test_checkpoint_scales_are_used_and_first_batch_fills_the_rest():
    names = {
        "model.layers.0.self_attn.k_scale": torch.tensor(0.5),
        "model.layers.0.self_attn.v_scale": torch.tensor([0.25]),
        "model.layers.1.self_attn.k_scale": torch.tensor(0.125),
    }  # layer 1 lacks v_scale
    pool = KVPool(64, 2, 2, 16, torch.float8_e5m2, "cpu", names)
    assert (pool.k_scales[0], pool.v_scales[0]) == (0.5, 0.25)
    k = torch.full((3, 2, 16), 3.0)
    pool.calibrate_scales(0, k, k)
    pool.calibrate_scales(1, k, 2 * k)
    assert (pool.k_scales[0], pool.v_scales[0]) == (0.5, 0.25)
    assert pool.k_scales[1] == pytest.approx(3.0 * 2 / 57344) and pool.v_scales[1] == pytest.approx(6.0 * 2 / 57344)


def test_all_zero_first_batch_falls_back_to_one_with_a_warning(caplog):
    pool = KVPool(64, 1, 2, 16, torch.float8_e4m3fn, "cpu")
    with caplog.at_level(logging.WARNING):
        pool.calibrate_scales(0, torch.zeros(2, 2, 16), torch.zeros(2, 2, 16))
    assert pool.k_scales == [1.0] and "using 1.0" in caplog.text


def test_float_pool_ignores_scales():
    pool = KVPool(64, 1, 2, 16, torch.float32, "cpu", {"model.layers.0.self_attn.k_scale": torch.tensor(3.0)})
    pool.calibrate_scales(0, torch.ones(2, 2, 16), torch.ones(2, 2, 16))
    assert pool.k_scales == [1.0] and pool.v_scales == [1.0]


def test_quality_command_scores_identical_kv_as_identical_and_fp8_as_different(tiny_path):
    """The harness behind `python -m radixgate.bench.fp8_quality`: full-precision KV
    scored against itself is exact, FP8 KV is close but not exact (so the FP8 path really ran)."""
    from radixgate.bench.fp8_quality import PROMPTS, measure

    same, fp8 = measure(tiny_path, ["auto", "fp8_e4m3"], PROMPTS[:2], num_tokens=8)
    assert (same.cosine, same.agreement, same.free_run) == pytest.approx((1.0, 1.0, 1.0), abs=1e-6)
    assert 0.99 < fp8.cosine < 1.0 - 1e-6
    assert 0.0 <= fp8.agreement <= 1.0 and 0.0 <= fp8.free_run <= 1.0
    assert same.top2_gap == fp8.top2_gap > 0  # a property of the reference logits alone


def test_quality_ablations_order_the_perturbations_by_size(tiny_path):
    """`--ablations`: bfloat16 rounding moves the logits less than e4m3 rounding, which moves them
    far less than scrambling V across positions."""
    from radixgate.bench.fp8_quality import PROMPTS, measure_ablations

    cosine = {name: cos for name, cos, _ in measure_ablations(tiny_path, PROMPTS[:2], num_tokens=8)}
    assert 1.0 > cosine["K, V rounded to bfloat16"] > cosine["K, V to e4m3"] > 0.99
    assert cosine["V rows shuffled across positions"] < 0.9
