"""The fidelity table's arithmetic (bench/tp_fidelity.py): exclusions by top-2 margin, logit
differences only over the steps whose inputs agreed, token matches."""

from __future__ import annotations

import torch

from radixgate.bench.tp_fidelity import compare, fidelity_prompts


def _logits(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows)


def test_compare_counts_exclusions_matches_and_the_largest_difference():
    decided = _logits([0.0, 1.0, 5.0], [3.0, 0.0, 0.0])
    close_call = _logits([1.0, 1.0005, 0.0], [0.0, 2.0, 0.0])  # margin 5e-4 at its first step
    reference = [([2, 0], decided), ([1, 1], close_call)]
    candidate = [([2, 0], decided + 2e-5), ([0, 2], close_call + 1.0)]  # the close call flipped
    row = compare("m", reference, candidate)
    assert (row.prompts, row.compared, row.excluded, row.token_match) == (2, 1, 1, 1)
    # the flipped prompt's logits count up to its first differing token (step 0), not after
    assert abs(row.max_logit_diff - 1.0) < 1e-6
    assert not row.passed  # 1e-0 > 1e-4, and 1 of 2 excluded is over 10%


def test_a_token_mismatch_on_a_decided_prompt_fails():
    decided = _logits([0.0, 1.0, 5.0], [3.0, 0.0, 0.0])
    row = compare("m", [([2, 0], decided)] * 10, [([2, 1], decided)] * 10)
    assert row.token_match == 0 and row.max_logit_diff == 0.0 and not row.passed


def test_prompts_are_distinct_and_some_share_a_prefix():
    prompts = fidelity_prompts(32, seed=7)
    assert len({tuple(p) for p in prompts}) == 32
    assert sum(p[:24] == q[:24] for p, q in zip(prompts, prompts[1:], strict=False)) >= 4
