"""`Engine.embed`: the last token's final hidden state, L2-normalised, equal to transformers' on the
same checkpoints, batched or alone, with the loop running, and leaving the KV pool untouched."""

from __future__ import annotations

import pytest
import torch
from hf_reference import hf_embeddings

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, 100000, (n,), generator=g).tolist() for n in (1, 5, 130, 37)]


@pytest.fixture(scope="module")
def tiny_engine(tiny_path):
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(model_path=tiny_path, max_total_tokens=4096))
    yield engine
    engine.check_idle_invariant()
    engine.shutdown()


@pytest.mark.parametrize("arch", ["llama3_gqa", "qwen2_bias"])  # the tiny model: tests/gateway/test_embeddings.py
def test_embed_matches_transformers(arch, checkpoints, prompts, make_engine):
    ref = hf_embeddings(checkpoints[arch], prompts)
    engine = make_engine(model_path=checkpoints[arch], page_size=16)
    batched = engine.embed(prompts)  # one prefill over prompts of mixed lengths
    assert batched.shape == ref.shape and batched.dtype == torch.float32
    assert (batched - ref).abs().max().item() < TOLERANCE
    assert torch.allclose(batched.norm(dim=-1), torch.ones(len(prompts)), atol=1e-6)
    alone = torch.cat([engine.embed([p]) for p in prompts])
    assert (alone - ref).abs().max().item() < TOLERANCE
    assert engine.stats()["max_total_num_tokens"] == engine.cache_manager.available_tokens  # nothing cached


def test_embed_groups_past_the_context(tiny_engine, prompts):
    """Prompts whose total passes the context run in several prefills; each result is its own."""
    runner = tiny_engine.runner
    together = runner.embed(prompts, tiny_engine.vocab_size, context_len=140)  # groups [1, 5], [130], [37]
    alone = torch.cat([tiny_engine.embed([p]) for p in prompts])
    assert torch.allclose(together, alone, atol=1e-6)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([], "no input to embed"),
        ([[1, 2], []], "input 1 is empty"),
        ([[1, 10**9]], "outside the vocabulary"),
        ([[-1]], "outside the vocabulary"),
        ([[1] * 8200], "context window is 8192: shorten it by at least 8 tokens"),
    ],
)
def test_embed_refusals_say_what_to_change(inputs, message, tiny_engine):
    with pytest.raises(ValueError, match=message):
        tiny_engine.embed(inputs)


def test_embed_runs_in_the_loop_beside_generation(tiny_engine, prompts):
    """With the loop thread serving, an embedding is a call in the loop: it never races the
    scheduler, and a generation running meanwhile is unaffected."""
    from radixgate.engine import SamplingParams

    greedy = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    before = tiny_engine.generate(input_ids=[prompts[2]], sampling=greedy)[0].token_ids
    offline = tiny_engine.embed(prompts)
    tiny_engine.start()
    assert torch.equal(tiny_engine.embed(prompts), offline)
    assert tiny_engine.generate(input_ids=[prompts[2]], sampling=greedy)[0].token_ids == before
    with pytest.raises(ValueError, match="input 0 is empty"):  # raised in the loop, handed back
        tiny_engine.embed([[]])
