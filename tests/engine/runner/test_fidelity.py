"""Greedy tokens equal Hugging Face `generate` on the same random-weight checkpoints (float32)."""

from __future__ import annotations

import pytest
import torch
from hf_reference import hf_greedy

from radixgate.engine import SamplingParams

NEW_TOKENS = 10


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 100000, (n,), generator=g).tolist() for n in (3, 300, 41, 97)]


@pytest.mark.parametrize("arch", ["llama3_gqa", "qwen2_bias", "tiny", "mistral"])
@pytest.mark.parametrize("page_size", [1, 16])
def test_greedy_matches_transformers(arch, page_size, checkpoints, prompts, make_engine):
    ref = hf_greedy(checkpoints[arch], prompts, NEW_TOKENS)  # computed once per architecture
    # chunked prefill on: the 300-token prompt runs in chunks of 64
    engine = make_engine(model_path=checkpoints[arch], page_size=page_size, chunked_prefill_size=64)
    greedy = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    cold = engine.generate(input_ids=prompts, sampling=greedy)  # a batch of mixed lengths
    assert [o.token_ids for o in cold] == ref
    assert all(o.cached_tokens == 0 for o in cold)
    warm = engine.generate(input_ids=prompts, sampling=greedy)  # every prefix now cached
    assert [o.token_ids for o in warm] == ref
    assert warm[1].cached_tokens >= 300 - page_size
    # a prompt that extends a cached one: prefix hit plus new tokens
    longer = prompts[1] + ref[1] + prompts[2]
    hit = engine.generate(input_ids=[longer], sampling=greedy)[0]
    assert hit.cached_tokens >= 300 - page_size
    assert hit.token_ids == hf_greedy(checkpoints[arch], [longer], NEW_TOKENS)[0]
