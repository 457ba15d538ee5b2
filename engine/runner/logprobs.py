"""Logprobs as vLLM reports them by default: the raw log-softmax of the model's logits, taken
before penalties, biases, grammar masks and temperature change them.

Output logprobs come from the rows the sampler sees (`record_output_logprobs`, called before the
processors run); prompt logprobs from extra LM-head rows the model runner adds for the prompt
positions a request asks about (`PromptLogprobRows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..scheduler.request import Req


def gather_logprobs(
    logits: torch.Tensor, token_ids: torch.Tensor, num_top: int
) -> tuple[list[float], list[list[tuple[int, float]]]]:
    """logits: [N, vocab] float32, token_ids: [N] -> (logprob of each token, the `num_top` best
    (id, logprob) pairs of each row). One log-softmax, one gather, one topk for all rows."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = logprobs.gather(1, token_ids.unsqueeze(1)).squeeze(1).tolist()
    if num_top <= 0:
        return chosen, [[] for _ in chosen]
    values, ids = logprobs.topk(min(num_top, logprobs.shape[-1]), dim=-1)
    top = [list(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)]
    return chosen, top


class OutputLogprobs:
    """Holds the log-softmax of the rows that asked for logprobs between the moment the step's raw
    logits exist and the moment the tokens are drawn."""

    def __init__(self, logits: torch.Tensor, reqs: Sequence[Req]):
        self.rows = [i for i, r in enumerate(reqs) if r.logprobs is not None]
        self.reqs = [reqs[i] for i in self.rows]
        # a copy: processors edit `logits` in place after this
        self.raw = logits[self.rows].clone() if self.rows else None

    def record(self, next_ids: torch.Tensor) -> None:
        """next_ids: [B] the step's tokens; appends each asking request's token logprob and top list."""
        if self.raw is None:
            return
        num_top = max(r.sampling.top_logprobs_num for r in self.reqs)
        chosen, top = gather_logprobs(self.raw, next_ids[self.rows], num_top)
        for req, value, best in zip(self.reqs, chosen, top, strict=True):
            assert req.logprobs is not None
            req.logprobs.output.append(value)
            req.logprobs.output_top.append(best[: req.sampling.top_logprobs_num])


@dataclass
class PromptSpan:
    """Prompt positions [first, first + count) of `req`, whose logits are rows [row, row + count)
    of the forward pass's extra LM-head rows; position p predicts prompt token p + 1."""

    req: Req
    first: int
    count: int
    row: int


def prompt_spans(reqs: Sequence[Req], starts: Sequence[int], extends: Sequence[int]) -> list[tuple[Req, int, int]]:
    """For a prefill batch: (req, first position, count) of the positions this step computes whose
    logits give a requested prompt logprob (token `logprob_start_len` on; token 0 has none)."""
    spans = []
    for req, s, e in zip(reqs, starts, extends, strict=True):
        if not req.sampling.wants_prompt_logprobs:
            continue
        first_needed = max(req.sampling.logprob_start_len, 1) - 1
        lo, hi = max(s, first_needed), min(s + e, len(req.origin_input_ids) - 1)
        if hi > lo:
            spans.append((req, lo, hi - lo))
    return spans


def record_prompt_logprobs(logits: torch.Tensor, spans: Sequence[PromptSpan]) -> None:
    """logits: [sum of counts, vocab], the spans' rows in order."""
    if not spans:
        return
    targets: list[int] = []
    for span in spans:
        targets += span.req.origin_input_ids[span.first + 1 : span.first + 1 + span.count]
    num_top = max(s.req.sampling.top_logprobs_num for s in spans)
    chosen, top = gather_logprobs(logits, torch.tensor(targets, device=logits.device), num_top)
    for span in spans:
        lp = span.req.logprobs
        assert lp is not None
        k = span.req.sampling.top_logprobs_num
        for j in range(span.count):
            lp.prompt[span.first + 1 + j] = chosen[span.row + j]
            lp.prompt_top[span.first + 1 + j] = top[span.row + j][:k]
