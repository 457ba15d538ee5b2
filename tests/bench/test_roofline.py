"""`radixgate bench roofline`: the fixed FLOP and byte definitions, and a small run end to end."""

from __future__ import annotations

import argparse

import pytest

from radixgate.bench import roofline

SHAPE = {
    "layers": 4,
    "heads": 8,
    "kv_heads": 2,
    "head_dim": 32,
    "hidden": 256,
    "vocab": 1000,
    "linear_params": 4 * (256 * 256 * 2 + 256 * 64 * 2 + 3 * 256 * 768),
    "weight_bytes": 4_000_000,
}


def test_prefill_flops_follow_the_definition():
    tokens = 4096
    linear = 2 * SHAPE["linear_params"] * tokens
    attention = 2 * 2 * 4 * 8 * 32 * tokens**2 / 2  # causal: half the score matrix
    lm_head_row = 2 * 1000 * 256
    assert roofline.prefill_flops(SHAPE, tokens) == linear + attention + lm_head_row


def test_decode_ideal_is_the_slower_of_compute_and_memory():
    batch, kv_tokens = 32, 32 * 160
    flops = 2 * (SHAPE["linear_params"] + 1000 * 256) * batch + 2 * 2 * 8 * 32 * 4 * kv_tokens
    kv_bytes = 2 * 4 * 4 * 2 * 32 * kv_tokens
    compute_bound = roofline.decode_step_ideal_s(SHAPE, batch, kv_tokens, peak=1e9, bandwidth=1e15)
    memory_bound = roofline.decode_step_ideal_s(SHAPE, batch, kv_tokens, peak=1e15, bandwidth=1e9)
    assert compute_bound == pytest.approx(flops / 1e9)
    assert memory_bound == pytest.approx((4_000_000 + kv_bytes) / 1e9)


def test_small_engine_run_reports_fractions_and_the_step_breakdown():
    result = roofline.measure_engine(prompt_len=64, batch=2, decode_prompt=16, decode_tokens=4)
    assert result["decode_steps"] == 3  # the first token comes from the prefill
    assert result["decode_kv_lens"] == [2 * 17, 2 * 18, 2 * 19]
    args = argparse.Namespace(prompt_len=64, batch=2, decode_prompt=16, decode_tokens=4, clock="wall")
    row = roofline.figures(result, roofline.model_shape(), args, peak=1e11, bw=2e10)
    assert 0 < row["prefill_fraction"] and 0 < row["decode_fraction"]
    # The timers nest (model inside runner, runner and scheduler inside the step): no part is negative.
    assert min(row["schedule_ms"], row["batch_build_ms"], row["sampling_and_rest_ms"]) >= 0, row
    assert 0 < result["decode_model_s"] <= result["decode_step_s"]
    text = roofline.format_report(
        {
            "threads": 1,
            "clock": "wall",
            "peak_gflops": [100.0],
            "bandwidth_gbs": [20.0],
            "before_ref": None,
            "after": row,
        },
        args,
    )
    assert text.startswith("fraction of this machine's measured matmul and copy speed")
    assert "of measured" in text.splitlines()[4] and text.splitlines()[5].startswith("after")
    assert "nominal" not in text  # no estimate given: none printed
    text = roofline.format_report(
        {"threads": 1, "clock": "wall", "peak_gflops": [100.0], "bandwidth_gbs": [20.0], "before_ref": None}
        | {"nominal_gflops": 2 * row["prefill_gflops"], "after": row},
        args,
    )
    assert "estimated nominal peak" in text and "prefill at after 50.0% of it" in text


def test_nominal_peak_from_lscpu():
    lscpu = "CPU max MHz:  3000.0000\nCore(s) per socket:  4\nSocket(s):  2\nFlags:  sse2 fma avx2\n"
    assert roofline.nominal_peak_flops(lscpu, cpuinfo="") == 3e9 * 8 * 2 * 8  # clock x cores x FMA width
    avx512 = "Core(s) per socket: 2\nSocket(s): 1\nFlags: fma avx2 avx512f\n"  # no MHz: /proc/cpuinfo's
    assert roofline.nominal_peak_flops(avx512, cpuinfo="cpu MHz\t\t: 2700.000\n") == 2.7e9 * 2 * 2 * 16
    assert roofline.nominal_peak_flops("Flags: avx512f\n", cpuinfo="") is None  # unreadable: omitted
    assert roofline.nominal_peak_flops(lscpu.replace("fma avx2", "sse4_2"), cpuinfo="") is None


def test_figures_from_known_timings():
    """Hand-made timings in, each figure checked against its hand-computed value."""
    result = {
        "prefill_s": 0.5,
        "decode_step_s": 0.010,
        "decode_model_s": 0.006,
        "decode_schedule_s": 0.001,
        "decode_batch_build_s": 0.002,
        "decode_rest_s": 0.001,
        "decode_kv_lens": [34, 36],
    }
    args = argparse.Namespace(prompt_len=64, batch=2)
    peak, bw = 1e9, 1e15  # compute-bound: the ideal is FLOPs / peak
    row = roofline.figures(result, SHAPE, args, peak=peak, bw=bw)
    assert row["prefill_tokens_per_s"] == pytest.approx(128.0)
    assert row["decode_tokens_per_s"] == pytest.approx(200.0)
    assert row["decode_step_ms"] == pytest.approx(10.0)
    assert row["outside_model_ms"] == pytest.approx(4.0)
    assert (row["schedule_ms"], row["batch_build_ms"], row["sampling_and_rest_ms"]) == pytest.approx((1.0, 2.0, 1.0))
    prefill_flops = 2 * SHAPE["linear_params"] * 64 + 2 * 2 * 4 * 8 * 32 * 64**2 / 2 + 2 * 1000 * 256
    assert row["prefill_fraction"] == pytest.approx(prefill_flops / peak / 0.5)
    assert row["prefill_gflops"] == pytest.approx(prefill_flops / 0.5 / 1e9)
    step_flops = [2 * (SHAPE["linear_params"] + 1000 * 256) * 2 + 2 * 2 * 8 * 32 * 4 * kv for kv in (34, 36)]
    ideal_s = sum(step_flops) / 2 / peak
    assert row["decode_ideal_step_ms"] == pytest.approx(1e3 * ideal_s)
    assert row["decode_fraction"] == pytest.approx(ideal_s / 0.010)
