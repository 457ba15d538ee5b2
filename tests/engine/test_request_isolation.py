"""One request never stops the engine: what the engine cannot honour is refused with a ValueError
naming the field before anything is allocated, and what fails inside one request's sampling, grammar,
detokenization or listener ends that request alone (finish_reason "error", its pages freed) while
the loop serves the others and the next request."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from radixgate.engine import SamplingParams
from radixgate.engine.runner import sampler
from radixgate.engine.sampling_fields import FIELD_KINDS, SEED_MAX, SEED_MIN
from radixgate.engine.scheduler.request import ReqStatus

GOOD = SamplingParams(max_new_tokens=3, temperature=0.0, ignore_eos=True)
FLOAT_FIELDS = [name for name, kind in FIELD_KINDS.items() if kind == "float"]


@pytest.fixture(scope="module")
def engine():
    """One engine for the module, stepped inline by the tests; it must end idle and leak-free."""
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(max_total_tokens=4096))
    yield engine
    try:
        engine.check_idle_invariant()
    finally:
        engine.shutdown()


def _still_serves(engine) -> None:
    assert engine.fatal_error is None
    engine.check_idle_invariant()
    out = engine.generate(input_ids=[[5, 6, 7]], sampling=GOOD)[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 3 and out.error is None
    engine.check_idle_invariant()


def _run(engine, *reqs) -> None:
    for req in reqs:
        engine._add(req)
    while any(r.status is not ReqStatus.FINISHED for r in reqs):
        engine.step()


# ---- refused before the loop -------------------------------------------------------------------
@pytest.mark.parametrize("seed", [2**64, 2**64 + 7, -(2**63) - 1, -(10**30)])
def test_a_seed_torch_cannot_take_is_refused_and_the_engine_serves_on(engine, seed: int) -> None:
    with pytest.raises(ValueError, match="seed must be an integer in"):
        engine.generate(input_ids=[[1, 2, 3]], sampling=SamplingParams(max_new_tokens=2, temperature=1.0, seed=seed))
    _still_serves(engine)


def test_seeds_at_torch_bounds_sample_and_negatives_wrap_as_torch_does(engine) -> None:
    def tokens(seed: int) -> list[int]:
        sp = SamplingParams(max_new_tokens=6, temperature=1.0, seed=seed, ignore_eos=True)
        return engine.generate(input_ids=[[9, 10, 11]], sampling=sp)[0].token_ids

    assert tokens(SEED_MAX) == tokens(-1) and len(tokens(SEED_MAX)) == 6  # -1 is 2**64 - 1 for torch
    assert tokens(SEED_MIN) == tokens(2**63)
    _still_serves(engine)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_non_finite_numbers_are_refused_by_name(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=name):
        SamplingParams(**{name: value})


def test_stop_token_ids_outside_the_vocabulary_are_refused(engine) -> None:
    """With min_new_tokens they index the logits: outside the vocabulary that raised in the loop."""
    bad = SamplingParams(max_new_tokens=3, min_new_tokens=2, stop_token_ids=[10**9])
    with pytest.raises(ValueError, match="stop_token_ids"):
        engine.generate(input_ids=[[1, 2, 3]], sampling=bad)
    _still_serves(engine)


# ---- failures inside one request ---------------------------------------------------------------
class _Matcher:
    """A request's real grammar matcher with one method made to fail."""

    def __init__(self, real: Any, failing: str) -> None:
        self._real, self._failing = real, failing

    def __getattr__(self, name: str) -> Any:
        return self._broken if name == self._failing else getattr(self._real, name)

    def _broken(self, *args: Any) -> Any:
        raise RuntimeError(f"{self._failing} broke")


def _pair(engine, sampling: SamplingParams, **kwargs):
    victim = engine._make_req([21, 22, 23, 24], sampling, None, None, kwargs.get("on_update"))
    bystander = engine._make_req([31, 32, 33, 34], GOOD, None, None, None)
    return victim, bystander


def _check_alone(engine, victim, bystander, stage: str) -> None:
    assert victim.result.finish_reason == "error" and stage in victim.result.error, victim.result
    assert bystander.result.finish_reason == "length" and len(bystander.result.token_ids) == 3
    _still_serves(engine)


def test_a_seeded_draw_that_raises_fails_only_its_request(engine, monkeypatch) -> None:
    real = sampler.torch_seed
    monkeypatch.setattr(sampler, "torch_seed", lambda s: real(s) if s != 4321 else 1 // 0)
    victim, bystander = _pair(engine, SamplingParams(max_new_tokens=3, temperature=1.0, seed=4321))
    _run(engine, victim, bystander)
    _check_alone(engine, victim, bystander, "seeded sampling")


@pytest.mark.parametrize("failing, stage", [("fill_next_token_bitmask", "grammar mask"), ("accept_token", "grammar")])
def test_a_grammar_that_raises_fails_only_its_request(engine, failing: str, stage: str) -> None:
    victim, bystander = _pair(engine, SamplingParams(max_new_tokens=3, temperature=0.0, regex="[a-z]+"))
    victim.grammar = _Matcher(victim.grammar, failing)
    _run(engine, victim, bystander)
    _check_alone(engine, victim, bystander, stage)


def test_a_token_the_grammar_refuses_fails_only_its_request(engine) -> None:
    victim, bystander = _pair(engine, SamplingParams(max_new_tokens=3, temperature=0.0, regex="[a-z]+"))
    real = victim.grammar
    victim.grammar = _Matcher(real, "")
    victim.grammar.accept_token = lambda token: False  # the matcher says no to what was sampled
    _run(engine, victim, bystander)
    _check_alone(engine, victim, bystander, "not allowed by the request's grammar")


@pytest.mark.parametrize("stop", [None, ["never-printed"]])
def test_detokenization_that_raises_fails_only_its_request(engine, monkeypatch, stop) -> None:
    real = engine.detokenizer.decode

    def decode(ids: list[int], skip_special_tokens: bool = True) -> str:
        if not skip_special_tokens:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "broken bytes")
        return real(ids, skip_special_tokens)

    monkeypatch.setattr(engine.detokenizer, "decode", decode)
    victim, bystander = _pair(engine, SamplingParams(max_new_tokens=3, skip_special_tokens=False, stop=stop))
    _run(engine, victim, bystander)
    _check_alone(engine, victim, bystander, "detokenization")


def test_a_listener_that_raises_ends_its_request_and_frees_its_pages(engine) -> None:
    def gone(req, delta) -> None:
        raise RuntimeError("Event loop is closed")  # what asyncio says once the caller's loop has ended

    sp = SamplingParams(max_new_tokens=3, temperature=0.0, ignore_eos=True)
    victim, bystander = _pair(engine, sp, on_update=gone)
    _run(engine, victim, bystander)
    _check_alone(engine, victim, bystander, "delivering the stream")


# ---- property: no field value stops the loop ---------------------------------------------------
EXTREME_INTS = [0, 1, -1, 2, 20, 21, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, 10**400]
EXTREME_FLOATS = [0.0, -0.0, 5e-324, 1e-300, 1e-5, 0.5, 1.0, 2.0, 100.0, 1e308, -1e308, -1.0]
EXTREME_FLOATS += [math.inf, -math.inf, math.nan]
TEXTS = ["", "a", "\ud800", "x\udfff", "é", "a" * 3000, "\x00", "[", "(", "{}", '{"type": "object"}', 'root ::= "a"']
_ints = st.sampled_from(EXTREME_INTS) | st.integers(-3, 300)
_floats = st.sampled_from(EXTREME_FLOATS) | st.floats()
_wrong = st.none() | st.booleans() | st.text(max_size=3) | st.lists(st.integers(0, 3), max_size=2)
_texts = st.sampled_from(TEXTS) | st.text(max_size=12)
# Each kind: a plain in-range value most of the time, else an extreme or ill-typed one.
_plain = {
    "int": st.integers(-1, 8),
    "float": st.floats(0.0, 2.0),
    "bool": st.booleans(),
    "seed": st.integers(0, SEED_MAX),
    "text": st.sampled_from(["a+", "[a-z]{1,3}", '{"type": "string"}', 'root ::= "a" | "b"']),
    "stop": st.lists(st.sampled_from(["a", ".", "zz"]), max_size=2),
    "token_ids": st.lists(st.integers(0, 100278), max_size=3),
    "bias": st.dictionaries(st.integers(0, 100278), st.floats(-100.0, 100.0), max_size=2),
    "pins": st.lists(st.tuples(st.integers(1, 8), st.floats(1.0, 3600.0)), max_size=2),
    "credit": st.just([]) | st.tuples(st.integers(1, 8), st.integers(1, 4096)).map(list),
}
_extreme = {
    "int": _ints | _floats | _wrong,
    "float": _floats | _ints | _wrong,
    "bool": _ints | _wrong,
    "seed": st.none() | _ints | st.integers() | _floats,
    "text": st.none() | _texts | _ints,
    "stop": _texts | st.lists(_texts | _ints, max_size=3) | _ints,
    "token_ids": st.lists(_ints | _floats, max_size=3) | _texts,
    "bias": st.dictionaries(_ints | _texts, _floats | _ints | _texts, max_size=3) | _ints,
    "pins": st.lists(st.tuples(_ints | _texts, _floats | _ints) | _ints | _texts, max_size=3) | _ints | _texts,
    "credit": st.lists(_ints | _floats | _texts, max_size=3) | _ints | _texts,
}
STRATEGIES = {kind: _plain[kind] | _plain[kind] | _extreme[kind] for kind in _plain}
# Every field of SamplingParams, by its kind: a new field without a kind fails here (KeyError).
FIELD_VALUES = {f.name: STRATEGIES[FIELD_KINDS[f.name]] for f in fields(SamplingParams)}


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_sampling_field_value_stops_the_loop(engine, data: st.DataObject) -> None:
    """One to three fields set to extreme or ill-typed values, the others left at their defaults."""
    names = data.draw(st.lists(st.sampled_from(sorted(FIELD_VALUES)), min_size=1, max_size=3, unique=True))
    values = {name: data.draw(FIELD_VALUES[name], label=name) for name in names}
    prompt = [41, 42, 43, 44, 45]
    try:
        sampling = SamplingParams(**values)
        engine.validate(prompt, sampling)
    except ValueError as exc:
        event(f"refused: {str(exc).split(' ')[0]}")
        engine.check_idle_invariant()  # refused with nothing allocated
        return
    event("ran in the loop")
    req = engine._make_req(prompt, sampling, None, None, None)
    engine._add(req)
    for _ in range(2):
        engine.step()
    engine.abort(req.rid)
    assert engine.fatal_error is None and req.status is ReqStatus.FINISHED
    engine.check_idle_invariant()
