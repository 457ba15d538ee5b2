"""Penalties, logit bias and min_new_tokens against references on the same logits, and their
effect on greedy output end to end."""

from __future__ import annotations

import torch
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

from radixgate.engine import SamplingParams
from radixgate.engine.runner.penalties import MinNewTokens, Penalties, apply_logit_bias
from radixgate.engine.runner.sampler import SamplingInfo
from radixgate.engine.scheduler.request import Req

VOCAB = 50


def vllm_reference(logits: torch.Tensor, prompt: list[int], output: list[int], p: SamplingParams) -> torch.Tensor:
    """vLLM's apply_penalties for one row, written per token."""
    logits = logits.clone()
    counts = torch.bincount(torch.tensor(output, dtype=torch.long), minlength=VOCAB).float()
    for t in set(prompt) | set(output):
        logits[t] = logits[t] / p.repetition_penalty if logits[t] > 0 else logits[t] * p.repetition_penalty
    return logits - p.frequency_penalty * counts - p.presence_penalty * (counts > 0).float()


def make_req(rid: str, prompt: list[int], output: list[int], p: SamplingParams) -> Req:
    req = Req(rid, prompt, p)
    req.output_ids = list(output)
    return req


def test_penalties_match_vllm_and_hf_over_steps():
    torch.manual_seed(0)
    params = [
        SamplingParams(frequency_penalty=0.7),
        SamplingParams(presence_penalty=-0.5, frequency_penalty=0.2),
        SamplingParams(repetition_penalty=1.4),
        SamplingParams(),  # no penalties: untouched
        SamplingParams(repetition_penalty=0.8, presence_penalty=1.0, frequency_penalty=-1.0),
    ]
    prompts = [torch.randint(0, VOCAB, (7,)).tolist() for _ in params]
    outputs: list[list[int]] = [[] for _ in params]
    penalties = Penalties(VOCAB, "cpu")
    reqs = [make_req(f"r{i}", prompts[i], [], p) for i, p in enumerate(params)]
    for _ in range(4):  # counts built incrementally, one sampled token per step
        logits = torch.randn(len(params), VOCAB) * 3
        got = logits.clone()
        penalties(got, SamplingInfo.from_reqs(reqs, "cpu"))
        for row, p in enumerate(params):
            torch.testing.assert_close(got[row], vllm_reference(logits[row], prompts[row], outputs[row], p))
            if p.repetition_penalty != 1.0 and not p.frequency_penalty and not p.presence_penalty:
                hf = RepetitionPenaltyLogitsProcessor(p.repetition_penalty)
                ids = torch.tensor([prompts[row] + outputs[row]])
                torch.testing.assert_close(got[row : row + 1], hf(ids, logits[row : row + 1].clone()))
        for row, req in enumerate(reqs):
            token = int(torch.randint(0, VOCAB, ()))
            outputs[row].append(token)
            req.output_ids.append(token)
    for req in reqs:
        penalties.release(req.rid)
    assert not penalties.row_of and len(penalties.free_rows) == penalties.counts.shape[0]


def test_logit_bias_and_min_new_tokens():
    logits = torch.zeros(2, VOCAB)
    reqs = [
        make_req("a", [1], [], SamplingParams(logit_bias={3: 5.0, 7: -100.0}, min_new_tokens=2, stop_token_ids=[9])),
        make_req("b", [1], [4, 4], SamplingParams(min_new_tokens=2)),  # reached its minimum
    ]
    info = SamplingInfo.from_reqs(reqs, "cpu")
    apply_logit_bias(logits, info)
    MinNewTokens([0, 1])(logits, info)
    assert logits[0, 3] == 5.0 and logits[0, 7] == -100.0
    assert torch.isinf(logits[0, [0, 1, 9]]).all() and not torch.isinf(logits[1]).any()


def test_penalties_change_greedy_output(make_engine):
    engine = make_engine()
    prompt = engine.tokenizer.encode("the cat sat on the mat and the cat sat on the", add_special_tokens=False)
    greedy = dict(max_new_tokens=12, temperature=0.0, ignore_eos=True)
    plain = engine.generate(input_ids=[prompt], sampling=SamplingParams(**greedy))[0].token_ids
    assert len(set(plain)) < len(plain)  # the random tiny model repeats itself
    fresh = engine.generate(input_ids=[prompt], sampling=SamplingParams(**greedy, presence_penalty=2.0))[0].token_ids
    assert fresh != plain and len(set(fresh)) > len(set(plain))
    forced = SamplingParams(**greedy, logit_bias={42: 100.0})
    assert set(engine.generate(input_ids=[prompt], sampling=forced)[0].token_ids) == {42}
    eos = engine.tokenizer.eos_token_id
    stop_first = SamplingParams(max_new_tokens=8, temperature=0.0, logit_bias={eos: 100.0})
    assert engine.generate(input_ids=[prompt], sampling=stop_first)[0].token_ids == [eos]
    held = SamplingParams(max_new_tokens=8, temperature=0.0, logit_bias={eos: 100.0}, min_new_tokens=3)
    out = engine.generate(input_ids=[prompt], sampling=held)[0].token_ids
    assert len(out) == 4 and out[-1] == eos
