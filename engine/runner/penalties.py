"""Penalties, logit bias and `min_new_tokens` as batched logits processors.

Semantics follow vLLM (and Hugging Face's `RepetitionPenaltyLogitsProcessor` for the repetition
penalty, which vLLM copies), applied to the raw logits before temperature, in this order:

1. `logit_bias`: `logits[t] += bias[t]` (OpenAI's field; token ids as keys).
2. `min_new_tokens`: while fewer tokens than that were generated, EOS and `stop_token_ids` get
   `-inf` (vLLM's `min_tokens`, SGLang's `min_new_tokens`).
3. penalties over a row's token counts:
   - repetition: a token seen in the prompt or the output has its logit divided by the penalty
     when positive, multiplied by it otherwise;
   - frequency: `logits[t] -= frequency_penalty * count_in_output[t]`;
   - presence:  `logits[t] -= presence_penalty * (count_in_output[t] > 0)`.

Token counts live in one table, a row per request that asks for penalties, updated incrementally:
each step adds the token sampled last step with one scatter, so no step walks a request's tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from ..scheduler.request import Req
from .sampler import SamplingInfo


def apply_logit_bias(logits: torch.Tensor, info: SamplingInfo) -> None:
    """logits: [B, vocab]; adds each row's `logit_bias` in one indexed add."""
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for row, req in enumerate(info.reqs):
        bias = req.sampling.logit_bias
        if bias:
            rows += [row] * len(bias)
            cols += bias.keys()
            values += bias.values()
    if rows:
        index = (torch.tensor(rows, device=logits.device), torch.tensor(cols, device=logits.device))
        logits.index_put_(index, torch.tensor(values, dtype=logits.dtype, device=logits.device), accumulate=True)


class MinNewTokens:
    """Forbids the request's stop tokens (EOS included) until it has `min_new_tokens` outputs."""

    def __init__(self, eos_token_ids: Iterable[int]):
        self.eos_token_ids = sorted(eos_token_ids)

    def __call__(self, logits: torch.Tensor, info: SamplingInfo) -> None:
        rows: list[int] = []
        cols: list[int] = []
        for row, req in enumerate(info.reqs):
            p = req.sampling
            if len(req.output_ids) < p.min_new_tokens:
                stops = set(p.stop_token_ids or ()) | (set() if p.ignore_eos else set(self.eos_token_ids))
                rows += [row] * len(stops)
                cols += stops
        if rows:
            logits[torch.tensor(rows, device=logits.device), torch.tensor(cols, device=logits.device)] = float("-inf")


class Penalties:
    """Repetition, frequency and presence penalties from per-request token-count rows.

    `counts[row]` holds how often each token appears in the request's output, `seen[row]` whether
    it appears in the prompt or the output. A row is taken the first step a request with penalties
    is sampled and given back by `release` when the request leaves the engine."""

    def __init__(self, vocab_size: int, device: torch.device | str):
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self.counts = torch.zeros(0, vocab_size, dtype=torch.float32, device=self.device)
        self.seen = torch.zeros(0, vocab_size, dtype=torch.bool, device=self.device)
        self.row_of: dict[str, int] = {}
        self.num_counted: dict[str, int] = {}  # output tokens already in counts[row]
        self.free_rows: list[int] = []

    def _take_row(self, req: Req) -> int:
        if not self.free_rows:
            old = self.counts.shape[0]
            grow = max(8, old)
            self.counts = torch.cat([self.counts, self.counts.new_zeros(grow, self.vocab_size)])
            self.seen = torch.cat([self.seen, self.seen.new_zeros(grow, self.vocab_size)])
            self.free_rows = list(range(old + grow - 1, old - 1, -1))
        row = self.free_rows.pop()
        self.counts[row].zero_()
        self.seen[row].zero_()
        self.seen[row, torch.tensor(req.origin_input_ids, device=self.device)] = True
        self.row_of[req.rid] = row
        self.num_counted[req.rid] = 0
        return row

    def release(self, rid: str) -> None:
        row = self.row_of.pop(rid, None)
        if row is not None:
            self.free_rows.append(row)
            del self.num_counted[rid]

    def _rows(self, reqs: Sequence[Req]) -> list[int]:
        """Each request's row, with the output tokens sampled since its last step counted in."""
        rows, new_rows, new_tokens = [], [], []
        for req in reqs:
            row = self.row_of.get(req.rid)
            if row is None:
                row = self._take_row(req)
            done = self.num_counted[req.rid]
            if done < len(req.output_ids):  # usually the one token sampled last step
                new = req.output_ids[done:]
                new_rows += [row] * len(new)
                new_tokens += new
                self.num_counted[req.rid] = len(req.output_ids)
            rows.append(row)
        if new_tokens:
            r = torch.tensor(new_rows, device=self.device)
            t = torch.tensor(new_tokens, device=self.device)
            self.counts.index_put_((r, t), torch.ones(len(t), device=self.device), accumulate=True)
            self.seen[r, t] = True
        return rows

    def __call__(self, logits: torch.Tensor, info: SamplingInfo) -> None:
        which = [i for i, r in enumerate(info.reqs) if r.sampling.has_penalties]
        if not which:
            return
        reqs = [info.reqs[i] for i in which]
        index = torch.tensor(which, device=logits.device)
        rows = torch.tensor(self._rows(reqs), device=self.device)
        counts, seen = self.counts[rows], self.seen[rows]  # [N, vocab]
        params = [r.sampling for r in reqs]

        def column(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=logits.dtype, device=logits.device).unsqueeze(1)

        sub = logits[index]
        rep = torch.where(seen, column([p.repetition_penalty for p in params]), 1.0)
        sub = torch.where(sub > 0, sub / rep, sub * rep)
        sub -= column([p.frequency_penalty for p in params]) * counts
        sub -= column([p.presence_penalty for p in params]) * (counts > 0)
        logits[index] = sub


def penalty_processors(vocab_size: int, device: torch.device | str, eos_token_ids: Iterable[int]) -> list:
    """The processors in the order vLLM applies them: bias, min tokens, penalties."""
    return [apply_logit_bias, MinNewTokens(eos_token_ids), Penalties(vocab_size, device)]
