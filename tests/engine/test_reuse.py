"""Shared prefixes are computed once: the chatbot workload and multi-turn conversations."""

from __future__ import annotations

import random

import pytest

from radixgate.engine import SamplingParams


def _system_prompt(tokenizer, n_tokens: int) -> list[int]:
    words = (
        "You are a careful support assistant for a hardware store. Answer briefly, cite the "
        "policy section, never invent prices, and escalate refunds above fifty dollars. "
    ).split()
    rng = random.Random(7)
    ids: list[int] = []
    while len(ids) < n_tokens:
        ids += tokenizer.encode(" " + rng.choice(words), add_special_tokens=False)
    return ids[:n_tokens]


def test_chatbot_workload_computes_the_system_prompt_once(make_engine):
    engine = make_engine(max_total_tokens=65536)
    system = _system_prompt(engine.tokenizer, 1000)
    questions = [
        engine.tokenizer.encode(
            f" Q{i}: where do I find item {i * 37 % 1000} and is it in stock?", add_special_tokens=False
        )
        for i in range(200)
    ]
    outs = engine.generate(
        input_ids=[system + q for q in questions], sampling=SamplingParams(max_new_tokens=1, temperature=0.0)
    )
    computed = engine.stats()["num_prefill_computed_tokens"]
    ideal = 1000 + sum(len(q) for q in questions)
    assert computed <= 1.02 * ideal, (computed, ideal)
    assert sum(o.cached_tokens for o in outs) >= 199 * 1000
    assert engine.stats()["cache_hit_rate"] > 0.8


@pytest.mark.parametrize("page_size", [1, 16])
def test_multi_turn_hits_previous_turn(make_engine, page_size):
    engine = make_engine(page_size=page_size)
    tok = engine.tokenizer
    prompt = _system_prompt(tok, 200) + tok.encode(" First question?", add_special_tokens=False)
    sampling = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)
    for turn in range(4):
        out = engine.generate(input_ids=[prompt], sampling=sampling)[0]
        next_prompt = prompt + out.token_ids + tok.encode(f" Follow-up {turn}?", add_special_tokens=False)
        nxt = engine.generate(input_ids=[next_prompt], sampling=SamplingParams(max_new_tokens=1, temperature=0))[0]
        assert nxt.cached_tokens >= len(prompt) + len(out.token_ids) - page_size
        prompt = next_prompt


def test_disabled_cache_recomputes_everything(make_engine):
    engine = make_engine(disable_radix_cache=True)
    ids = list(range(1000, 1400))
    for _ in range(2):
        out = engine.generate(input_ids=[ids], sampling=SamplingParams(max_new_tokens=2, temperature=0))[0]
        assert out.cached_tokens == 0
    assert engine.stats()["num_prefill_computed_tokens"] == 2 * 400
    assert engine.stats()["cache_hit_rate"] == 0.0


def test_tenants_do_not_share_prefixes(make_engine):
    engine = make_engine()
    ids = list(range(500, 800))
    s = SamplingParams(max_new_tokens=1, temperature=0)
    engine.generate(input_ids=[ids], sampling=s, cache_salt="tenant-a")
    assert engine.generate(input_ids=[ids], sampling=s, cache_salt="tenant-b")[0].cached_tokens == 0
    assert engine.generate(input_ids=[ids], sampling=s, cache_salt="tenant-a")[0].cached_tokens == 299
