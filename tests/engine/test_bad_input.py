"""Bad input: a ValueError that says what to change, nothing allocated, the engine keeps serving."""

from __future__ import annotations

import asyncio

import pytest

from radixgate.engine import EngineConfig, SamplingParams


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(temperature=-0.5), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=0), "top_k"),
        (dict(min_p=2.0), "min_p"),
    ],
)
def test_bad_sampling_params(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(page_size=3), "page_size"),
        (dict(schedule_policy="random"), "schedule_policy"),
        (dict(max_total_tokens=2), "max_total_tokens"),
        (dict(attention_backend="flash"), "attention_backend"),
    ],
)
def test_bad_engine_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**kwargs)


def test_bad_requests_are_rejected_before_allocation(make_engine):
    engine = make_engine(max_total_tokens=2048)
    ok = SamplingParams(max_new_tokens=2, temperature=0)
    before = engine.stats()["available_tokens"]
    cases = [
        ([], "empty"),
        ([1, -1], "outside the vocabulary"),
        ([10**7], "outside the vocabulary"),
        (list(range(100, 100 + engine.context_len + 5)), "context window"),
        (list(range(100, 2200)), "max_total_tokens"),
    ]
    for ids, message in cases:
        with pytest.raises(ValueError, match=message):
            engine.generate(input_ids=[ids], sampling=ok)
        assert engine.stats()["available_tokens"] == before
    with pytest.raises(ValueError, match="exactly one"):
        engine.generate(prompts=["a"], input_ids=[[1]], sampling=ok)
    # the engine still serves, inline and through the streaming path
    assert engine.generate(input_ids=[[1, 2, 3]], sampling=ok)[0].finish_reason == "length"

    async def stream_bad_then_good():
        with pytest.raises(ValueError, match="empty"):
            async for _ in engine.stream(input_ids=[], sampling=ok):
                pass
        return [d async for d in engine.stream(input_ids=[4, 5, 6], sampling=ok)]

    deltas = asyncio.run(stream_bad_then_good())
    assert deltas[-1].finished and len(deltas[-1].output.token_ids) == 2


def test_duplicate_request_id_is_rejected(make_engine):
    engine = make_engine()
    from radixgate.engine.scheduler.request import Req  # noqa: F401

    req = engine._make_req([1, 2], SamplingParams(max_new_tokens=2), None, "same", None)
    engine._add(req)
    with pytest.raises(ValueError, match="already in use"):
        engine._make_req([1, 2], SamplingParams(max_new_tokens=2), None, "same", None)
    engine.abort("same")
