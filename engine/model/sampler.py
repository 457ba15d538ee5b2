"""Next-token sampling: greedy, temperature, top-k, top-p, min-p, per-request seeds."""

from __future__ import annotations

import torch

from ..scheduler.request import Req


def sample(logits: torch.Tensor, reqs: list[Req]) -> list[int]:
    """logits: [B, vocab] float32, one row per request -> one token id per request."""
    if all(r.sampling.is_greedy for r in reqs):
        return logits.argmax(dim=-1).tolist()
    out: list[int] = []
    for row, req in zip(logits, reqs, strict=False):
        out.append(_sample_one(row, req))
    return out


def _sample_one(logits: torch.Tensor, req: Req) -> int:
    p = req.sampling
    if p.is_greedy:
        return int(logits.argmax())
    logits = logits / p.temperature
    if p.top_k > 0 and p.top_k < logits.numel():
        kth = torch.topk(logits, p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if not torch.isfinite(probs).all():  # a temperature so small that logits overflowed: greedy
        return int(logits.argmax())
    if p.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        cum = sorted_probs.cumsum(0)
        # keep the smallest set whose mass reaches top_p (the token crossing it included)
        drop = (cum - sorted_probs) >= p.top_p
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    if p.min_p > 0.0:
        probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
    if not probs.sum() > 0:  # filters underflowed to nothing: keep the most likely token
        return int(logits.argmax())
    generator = None
    if p.seed is not None:
        if getattr(req, "generator", None) is None:
            req.generator = torch.Generator(device=logits.device).manual_seed(p.seed)
        generator = req.generator
    return int(torch.multinomial(probs, 1, generator=generator))
