"""Overlap scheduling (scheduler/overlap.py) gives the tokens the synchronous loop gives. On CPU
every op is synchronous, so this checks the bookkeeping: launching decode step N+1 on step N's
device ids, dropping rows of requests that finished at N, falling back to the synchronous step
for prefills, retractions and requests whose processors read the host's output ids."""

from __future__ import annotations

import dataclasses

import pytest

from radixgate.engine import Engine, EngineConfig, SamplingParams

PROMPTS = [f"Story {i}: once upon a time, a robot numbered {i * 11} found" for i in range(6)]


@pytest.fixture(scope="module")
def engine():
    engine = Engine(EngineConfig(max_total_tokens=4096))
    yield engine
    engine.shutdown()


def run(engine: Engine, overlap: bool, prompts, sampling) -> list[list[int]]:
    from radixgate.engine.scheduler.overlap import RunAhead

    engine.run_ahead = RunAhead(engine) if overlap else None
    try:
        out = [o.token_ids for o in engine.generate(prompts, sampling=sampling)]
        launched = engine.run_ahead.num_launched if engine.run_ahead else 0
    finally:
        engine.run_ahead = None
    engine.check_idle_invariant()
    engine.flush_cache()
    run.launched = launched  # type: ignore[attr-defined]
    return out


def test_greedy_and_seeded_tokens_match_the_synchronous_loop(engine):
    # different lengths: requests finish at different steps while the next step is already launched
    sampling = [SamplingParams(temperature=0.0, max_new_tokens=3 + 4 * i, ignore_eos=True) for i in range(3)] + [
        SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_new_tokens=6 + i, ignore_eos=True) for i in range(3)
    ]
    expected = run(engine, False, PROMPTS, sampling)
    got = run(engine, True, PROMPTS, sampling)
    assert got == expected
    assert run.launched >= 9  # type: ignore[attr-defined]


def test_stop_conditions_found_one_step_late_drop_the_extra_token(engine):
    eos_free = SamplingParams(temperature=0.0, max_new_tokens=24)
    first = run(engine, False, PROMPTS[:2], eos_free)
    stop_token = first[0][5]  # the sixth token of the first request stops it there
    sampling = dataclasses.replace(eos_free, stop_token_ids=[stop_token])
    expected = run(engine, False, PROMPTS[:2], sampling)
    got = run(engine, True, PROMPTS[:2], sampling)
    assert got == expected and got[0][-1] == stop_token and len(got[0]) <= 6


def test_processors_and_new_arrivals_fall_back_to_the_synchronous_step(engine):
    penalized = SamplingParams(temperature=0.0, max_new_tokens=8, frequency_penalty=1.5, ignore_eos=True)
    plain = SamplingParams(temperature=0.0, max_new_tokens=8, ignore_eos=True)
    mixed = [penalized, plain, plain]
    assert run(engine, True, PROMPTS[:3], mixed) == run(engine, False, PROMPTS[:3], mixed)
    assert run.launched == 0  # type: ignore[attr-defined]  # the penalized request reads host output ids

    # requests arriving while others decode: the step with their prefill runs synchronously
    from radixgate.engine.scheduler.overlap import RunAhead

    baseline: list[list[int]] = []
    for overlap in (False, True):
        engine.run_ahead = RunAhead(engine) if overlap else None
        reqs = [engine._make_req(engine._encode_all(p, None)[0], plain, None, None, None) for p in PROMPTS[:4]]
        engine._add(reqs[0])
        engine._add(reqs[1])
        for _ in range(3):
            engine.step()
        engine._add(reqs[2])
        engine.step()
        engine._add(reqs[3])
        while engine.step():
            pass
        outs = [r.result.token_ids for r in reqs]
        if overlap:
            assert outs == baseline and engine.run_ahead.num_launched > 0
        baseline = outs
        engine.run_ahead = None
        engine.check_idle_invariant()
        engine.flush_cache()


def test_pool_pressure_retracts_only_from_a_synchronous_step():
    small = Engine(EngineConfig(max_total_tokens=160, chunked_prefill_size=64))
    try:
        sampling = SamplingParams(temperature=0.0, max_new_tokens=28, ignore_eos=True)
        prompts = [p * 2 for p in PROMPTS[:4]]
        expected = run(small, False, prompts, sampling)
        retracted = small.scheduler.num_retracted
        got = run(small, True, prompts, sampling)
        assert retracted > 0 and small.scheduler.num_retracted > retracted
        assert got == expected
    finally:
        small.shutdown()


def test_an_abort_while_a_step_is_in_flight(engine):
    from radixgate.engine.scheduler.overlap import RunAhead

    engine.run_ahead = RunAhead(engine)
    try:
        plain = SamplingParams(temperature=0.0, max_new_tokens=30, ignore_eos=True)
        reqs = [engine._make_req(engine._encode_all(p, None)[0], plain, None, None, None) for p in PROMPTS[:3]]
        for r in reqs:
            engine._add(r)
        for _ in range(6):
            engine.step()
        assert engine.run_ahead.inflight is not None
        engine._abort_now(reqs[1].rid)  # the loop thread is not running: abort as the loop would
        while engine.step():
            pass
    finally:
        engine.run_ahead = None
    assert reqs[1].result.finish_reason == "abort" and len(reqs[1].result.token_ids) < 30
    assert [len(r.result.token_ids) for r in (reqs[0], reqs[2])] == [30, 30]
    engine.check_idle_invariant()
    engine.flush_cache()


def test_the_flag_turns_overlap_on_in_an_engine(engine):
    """`--enable-overlap-schedule` builds an engine whose decode steps are launched ahead (counted in
    its stats), with the same tokens as the engine without it, which launches none."""
    from radixgate.gateway.cli import build_parser, engine_config

    config = engine_config(build_parser().parse_args(["--enable-overlap-schedule", "--max-total-tokens", "4096"]))
    sampling = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    overlapped = Engine(config)
    try:
        tokens = [o.token_ids for o in overlapped.generate(PROMPTS[:2], sampling=sampling)]
        assert overlapped.stats()["overlap_steps"] == 7  # each of the 7 decode steps was launched ahead
        overlapped.check_idle_invariant()
    finally:
        overlapped.shutdown()
    assert engine.stats()["overlap_steps"] == 0
    assert run(engine, False, PROMPTS[:2], sampling) == tokens
