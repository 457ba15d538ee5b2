"""Logprobs equal the log-softmax of Hugging Face `transformers` logits on the same checkpoint:
output tokens, prompt tokens (also over a cached prefix), top-k lists, and the raw-logits rule
(penalties and temperature do not change what is reported)."""

from __future__ import annotations

import hf_reference
import pytest
import torch

from radixgate.engine import SamplingParams

TOL = 1e-4


@pytest.fixture(scope="module")
def hf_model(checkpoints):
    return hf_reference.hf_model(checkpoints["llama3_gqa"])  # loaded once per process (test_fidelity's too)


def hf_logprobs(model, ids: list[int]) -> torch.Tensor:
    """[len(ids), vocab]: row p is the distribution of token p + 1."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)


PROMPT = [791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13, 578, 4062, 14198, 39935, 35308, 927, 279]


def test_output_and_prompt_logprobs_match_transformers(checkpoints, hf_model, make_engine):
    engine = make_engine(model_path=checkpoints["llama3_gqa"], page_size=16, chunked_prefill_size=16)
    params = SamplingParams(
        max_new_tokens=6, temperature=0.0, ignore_eos=True, return_logprob=True, top_logprobs_num=5, logprob_start_len=0
    )
    out = engine.generate(input_ids=[PROMPT], sampling=params)[0]
    ref = hf_logprobs(hf_model, PROMPT + out.token_ids)
    n = len(PROMPT)
    # one per output token; greedy: the chosen token's logprob is the best of its top list
    assert len(out.output_token_logprobs) == len(out.token_ids) == 6
    for i, (token, value, top) in enumerate(
        zip(out.token_ids, out.output_token_logprobs, out.output_top_logprobs, strict=True)
    ):
        assert abs(value - float(ref[n - 1 + i, token])) < TOL
        assert len(top) == 5 and top[0][0] == token and abs(top[0][1] - value) < 1e-6
        ref_top = ref[n - 1 + i].topk(5)
        assert [t for t, _ in top] == ref_top.indices.tolist()
    # one per prompt token, the first None; the 17-token prompt ran in two chunks of 16
    assert len(out.input_token_logprobs) == n and out.input_token_logprobs[0] is None
    expected = [float(ref[p - 1, PROMPT[p]]) for p in range(1, n)]
    assert max(abs(a - b) for a, b in zip(out.input_token_logprobs[1:], expected, strict=True)) < TOL
    # a prefix hit: the same prompt again still gets every prompt logprob (the span is recomputed)
    again = engine.generate(input_ids=[PROMPT + [11]], sampling=params)[0]
    assert len(again.input_token_logprobs) == n + 1 and again.input_token_logprobs[0] is None
    assert max(abs(a - b) for a, b in zip(again.input_token_logprobs[1:n], expected, strict=True)) < TOL
    # from a later start: the prefix before it may come from the cache
    late = engine.generate(input_ids=[PROMPT], sampling=SamplingParams(**{**params.__dict__, "logprob_start_len": 16}))
    assert late[0].cached_tokens == 0 or late[0].cached_tokens <= 15
    assert len(late[0].input_token_logprobs) == 1 and abs(late[0].input_token_logprobs[0] - expected[-1]) < TOL


def test_reported_logprobs_are_raw_whatever_the_processors_do(checkpoints, hf_model, make_engine):
    engine = make_engine(model_path=checkpoints["llama3_gqa"])
    penalised = SamplingParams(
        max_new_tokens=5,
        temperature=0.7,
        seed=3,
        ignore_eos=True,
        return_logprob=True,
        top_logprobs_num=2,
        presence_penalty=1.5,
        repetition_penalty=1.3,
        logit_bias={5: 10.0},
    )
    out = engine.generate(input_ids=[PROMPT], sampling=penalised)[0]
    ref = hf_logprobs(hf_model, PROMPT + out.token_ids)
    n = len(PROMPT)
    for i, token in enumerate(out.token_ids):
        assert abs(out.output_token_logprobs[i] - float(ref[n - 1 + i, token])) < TOL
    assert out.input_token_logprobs == []  # logprob_start_len -1: no prompt logprobs
    plain = engine.generate(input_ids=[PROMPT], sampling=SamplingParams(max_new_tokens=2))[0]
    assert plain.output_token_logprobs is None


def test_logprob_start_len_past_the_prompt_is_refused(checkpoints, make_engine):
    engine = make_engine(model_path=checkpoints["llama3_gqa"])
    with pytest.raises(ValueError, match="logprob_start_len"):
        engine.generate(input_ids=[[1, 2, 3]], sampling=SamplingParams(return_logprob=True, logprob_start_len=3))
