"""Continuous batching under pressure: retraction, aborts, chunked prefill, policies."""

from __future__ import annotations

import asyncio

import pytest

from radixgate.engine import SamplingParams

GREEDY = SamplingParams(max_new_tokens=24, temperature=0.0, ignore_eos=True)


def _prompts(n: int, length: int, base: int = 1000) -> list[list[int]]:
    return [[base + (i * 131 + j * 7) % 90000 for j in range(length)] for i in range(n)]


def test_retraction_when_the_pool_runs_out_gives_the_same_tokens(make_engine):
    prompts = _prompts(6, 50)
    roomy = make_engine(max_total_tokens=16384).generate(input_ids=prompts, sampling=GREEDY)
    tight = make_engine(max_total_tokens=200, disable_radix_cache=True)
    outs = tight.generate(input_ids=prompts, sampling=GREEDY)
    assert tight.stats()["num_retracted_reqs"] > 0
    assert [o.token_ids for o in outs] == [o.token_ids for o in roomy]
    assert all(o.finish_reason == "length" and len(o.token_ids) == 24 for o in outs)


def test_retraction_with_cache_and_pages(make_engine):
    prompts = _prompts(6, 70)
    roomy = make_engine(page_size=16).generate(input_ids=prompts, sampling=GREEDY)
    tight = make_engine(max_total_tokens=320, page_size=16)
    assert [o.token_ids for o in tight.generate(input_ids=prompts, sampling=GREEDY)] == [o.token_ids for o in roomy]


def test_chunked_prefill_matches_unchunked(make_engine):
    prompts = _prompts(3, 500)
    whole = make_engine(chunked_prefill_size=4096).generate(input_ids=prompts, sampling=GREEDY)
    chunked = make_engine(chunked_prefill_size=64, max_prefill_tokens=128).generate(input_ids=prompts, sampling=GREEDY)
    assert [o.token_ids for o in chunked] == [o.token_ids for o in whole]


@pytest.mark.parametrize("policy", ["lpm", "fcfs"])
def test_policies_give_the_same_greedy_tokens(make_engine, policy):
    shared = list(range(2000, 2300))
    prompts = [shared + [5000 + i] * (i + 1) for i in range(6)] + _prompts(2, 40)
    ref = make_engine(disable_radix_cache=True).generate(input_ids=prompts, sampling=GREEDY)
    outs = make_engine(schedule_policy=policy).generate(input_ids=prompts, sampling=GREEDY)
    assert [o.token_ids for o in outs] == [o.token_ids for o in ref]


def test_in_batch_prefix_sharing_computes_a_shared_prefix_once(make_engine):
    engine = make_engine()
    shared = list(range(3000, 3800))
    prompts = [shared + [7000 + i, 7100 + i] for i in range(10)]
    engine.generate(input_ids=prompts, sampling=SamplingParams(max_new_tokens=1, temperature=0))
    assert engine.stats()["num_prefill_computed_tokens"] <= 800 + 10 * 2 + 10


def test_abort_frees_everything_at_any_point(make_engine):
    engine = make_engine(max_total_tokens=4096)

    async def run():
        async def one(i: int, stop_after: int):
            got = 0
            gen = engine.stream(
                input_ids=_prompts(1, 50 + i, base=100 * i)[0],
                sampling=SamplingParams(max_new_tokens=40, temperature=0.0, ignore_eos=True),
            )
            async for delta in gen:
                got += len(delta.token_ids)
                if got >= stop_after:
                    break
            await gen.aclose()
            return got

        return await asyncio.wait_for(asyncio.gather(*(one(i, s) for i, s in enumerate([1, 5, 40, 3, 40]))), 60)

    got = asyncio.run(run())
    assert got[2] == 40 and got[4] == 40
    engine.abort("no-such-request")  # unknown ids are ignored


def test_abort_before_scheduling_and_while_waiting(make_engine):
    engine = make_engine()

    req = engine._make_req([1, 2, 3], GREEDY, None, "r1", None)
    engine._add(req)
    engine.abort("r1")
    assert req.result.finish_reason == "abort" and req.result.token_ids == []


def test_lone_request_larger_than_pool_stops_with_length(make_engine):
    engine = make_engine(max_total_tokens=64, disable_radix_cache=True)
    out = engine.generate(
        input_ids=[list(range(100, 150))], sampling=SamplingParams(max_new_tokens=100, temperature=0, ignore_eos=True)
    )[0]
    assert out.finish_reason == "length" and 0 < len(out.token_ids) <= 15
