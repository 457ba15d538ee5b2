"""The batched sampler against a per-row reference, on random logits with mixed settings."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixgate.engine import SamplingParams
from radixgate.engine.runner.sampler import _ARGMAX_BLOCK, Sampler, SamplingInfo, _filtered_probs, argmax_rows
from radixgate.engine.scheduler.request import Req


def _reference_probs(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    logits = logits / p.temperature
    if 0 < p.top_k < logits.numel():
        logits = logits.masked_fill(logits < torch.topk(logits, p.top_k).values[-1], float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if p.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        sorted_probs[(sorted_probs.cumsum(0) - sorted_probs) >= p.top_p] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    if p.min_p > 0.0:
        probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
    return probs


PARAMS = [
    SamplingParams(temperature=0.7),
    SamplingParams(temperature=1.0, top_k=5),
    SamplingParams(temperature=1.3, top_p=0.5),
    SamplingParams(temperature=0.9, min_p=0.2),
    SamplingParams(temperature=1.0, top_k=50, top_p=0.9, min_p=0.05),
]


def test_filters_match_the_per_row_reference():
    torch.manual_seed(0)
    logits = torch.randn(len(PARAMS), 1000) * 3
    reqs = [Req(f"r{i}", [1], p) for i, p in enumerate(PARAMS)]
    got = _filtered_probs(logits.clone(), SamplingInfo.from_reqs(reqs, "cpu"))
    for row, p in enumerate(PARAMS):
        torch.testing.assert_close(got[row], _reference_probs(logits[row], p), rtol=1e-5, atol=1e-7)


def test_greedy_rows_take_the_argmax_and_seeded_rows_ignore_their_neighbours():
    torch.manual_seed(1)
    logits = torch.randn(4, 500)
    greedy = Req("g", [1], SamplingParams(temperature=0.0))
    draws = []
    for neighbours in (0, 2):
        seeded = Req("s", [1], SamplingParams(temperature=1.0, seed=7))
        others = [Req(f"o{i}", [1], SamplingParams(temperature=1.0)) for i in range(neighbours)]
        batch = [greedy, seeded, *others]
        out = Sampler()(logits[: len(batch)].clone(), batch)
        assert out[0] == int(logits[0].argmax())
        draws.append(out[1])
    assert draws[0] == draws[1]


def test_processors_run_before_the_draw():
    def forbid_argmax(logits: torch.Tensor, info: SamplingInfo) -> None:
        logits[torch.arange(len(info.reqs)), logits.argmax(-1)] = float("-inf")

    logits = torch.randn(2, 100)
    reqs = [Req("a", [1], SamplingParams(temperature=0.0)), Req("b", [1], SamplingParams(temperature=0.0))]
    out = Sampler([forbid_argmax])(logits.clone(), reqs)
    assert out == logits.topk(2, dim=-1).indices[:, 1].tolist()


@settings(max_examples=150, deadline=None)
@given(
    rows=st.integers(1, 4),
    extra=st.integers(0, 700),
    levels=st.integers(1, 5),
    special=st.sampled_from(["none", "nan", "all_-inf", "last", "inf"]),
    seed=st.integers(0, 2**16),
)
def test_blocked_argmax_equals_torch_argmax(rows: int, extra: int, levels: int, special: str, seed: int):
    """Few distinct values (so ties everywhere), NaN, -inf rows, a maximum in the short last block."""
    g = torch.Generator().manual_seed(seed)
    n = 4 * _ARGMAX_BLOCK + extra
    x = torch.randint(0, levels, (rows, n), generator=g).float()
    where = int(torch.randint(0, n, (1,), generator=g))
    if special == "nan":
        x[0, where] = float("nan")
    elif special == "all_-inf":
        x[:] = float("-inf")
    elif special == "last":
        x[:, -1] = levels
    elif special == "inf":
        x[rows - 1, where] = float("inf")
    assert torch.equal(argmax_rows(x), x.argmax(dim=-1))
