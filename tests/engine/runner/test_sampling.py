"""Sampling parameters and stop conditions."""

from __future__ import annotations

import pytest

from radixgate.engine import SamplingParams


@pytest.fixture(scope="module")
def engine():
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(max_total_tokens=8192))
    yield engine
    engine.check_idle_invariant()
    engine.shutdown()


PROMPT = [[9906, 1917, 11, 1296, 374, 264, 1296]]


def test_seeded_sampling_is_reproducible_and_seeds_differ(engine):
    def s(seed: int) -> SamplingParams:
        return SamplingParams(max_new_tokens=16, temperature=1.0, seed=seed, ignore_eos=True)

    a = engine.generate(input_ids=PROMPT * 2, sampling=s(1))
    b = engine.generate(input_ids=PROMPT, sampling=s(1))[0]
    c = engine.generate(input_ids=PROMPT, sampling=s(2))[0]
    assert a[0].token_ids == a[1].token_ids == b.token_ids
    assert c.token_ids != b.token_ids


def test_top_k_one_and_tiny_top_p_equal_greedy(engine):
    greedy = engine.generate(
        input_ids=PROMPT, sampling=SamplingParams(max_new_tokens=8, temperature=0, ignore_eos=True)
    )[0].token_ids
    for p in (
        SamplingParams(max_new_tokens=8, temperature=1.0, top_k=1, ignore_eos=True),
        SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1e-6, seed=3, ignore_eos=True),
        SamplingParams(max_new_tokens=8, temperature=0.7, min_p=1.0, seed=3, ignore_eos=True),
    ):
        assert engine.generate(input_ids=PROMPT, sampling=p)[0].token_ids == greedy


def test_stop_token_ids_and_max_new_tokens(engine):
    greedy = engine.generate(
        input_ids=PROMPT, sampling=SamplingParams(max_new_tokens=8, temperature=0, ignore_eos=True)
    )[0]
    assert greedy.finish_reason == "length" and len(greedy.token_ids) == 8
    stop_id = greedy.token_ids[3]
    first = greedy.token_ids.index(stop_id)
    out = engine.generate(
        input_ids=PROMPT, sampling=SamplingParams(max_new_tokens=8, temperature=0, stop_token_ids=[stop_id])
    )[0]
    assert out.finish_reason == "stop" and out.token_ids == greedy.token_ids[: first + 1]


def test_stop_string_cuts_the_text(engine):
    full = engine.generate(
        input_ids=PROMPT, sampling=SamplingParams(max_new_tokens=12, temperature=0, ignore_eos=True)
    )[0]
    stop = full.text[len(full.text) // 2 : len(full.text) // 2 + 3]
    assert stop.strip()
    out = engine.generate(
        input_ids=PROMPT, sampling=SamplingParams(max_new_tokens=12, temperature=0, stop=[stop], ignore_eos=True)
    )[0]
    assert out.finish_reason == "stop"
    assert out.text == full.text[: full.text.index(stop)]
    assert len(out.token_ids) < 12


def test_eos_stops_unless_ignored(engine):
    # Force EOS by listing the greedy token as an EOS id through stop_token_ids semantics
    eos = engine.tokenizer.eos_token_id
    sched = engine.scheduler
    greedy = engine.generate(
        input_ids=PROMPT, sampling=SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True)
    )[0].token_ids
    original = sched.eos_token_ids
    sched.eos_token_ids = frozenset({greedy[0], eos})
    try:
        stopped = engine.generate(input_ids=PROMPT, sampling=SamplingParams(max_new_tokens=4, temperature=0))[0]
        ignored = engine.generate(
            input_ids=PROMPT, sampling=SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True)
        )[0]
    finally:
        sched.eos_token_ids = original
    assert stopped.finish_reason == "stop" and stopped.token_ids == greedy[:1]
    assert ignored.token_ids == greedy


def test_extreme_temperature_and_top_p_do_not_break_the_engine(engine):
    greedy = engine.generate(
        input_ids=PROMPT, sampling=SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True)
    )[0].token_ids
    for p in (
        SamplingParams(max_new_tokens=4, temperature=1e-300, ignore_eos=True),
        SamplingParams(max_new_tokens=4, temperature=1e-3, top_p=1e-300, seed=1, ignore_eos=True),
        SamplingParams(max_new_tokens=4, temperature=50.0, top_p=1e-300, min_p=1.0, seed=1, ignore_eos=True),
    ):
        assert engine.generate(input_ids=PROMPT, sampling=p)[0].token_ids == greedy
