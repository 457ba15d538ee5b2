"""The packed LM head against F.linear: same logits up to float32 summation order, remade when the weight changes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixgate.engine.models.lm_head import PackedLMHead


@pytest.mark.parametrize("rows", [1, 7, 32, 65])
def test_packed_head_matches_linear(rows: int):
    torch.manual_seed(rows)
    weight, x = torch.randn(5000, 96) * 0.1, torch.randn(rows, 96)
    head = PackedLMHead()
    got = head.logits(x, weight)
    assert head.enabled, "this torch has oneDNN: the packed path is the one under test"
    assert got.shape == (rows, 5000) and got.dtype == torch.float32
    torch.testing.assert_close(got, F.linear(x, weight), rtol=0, atol=1e-5)
    assert torch.equal(got.argmax(-1), F.linear(x, weight).argmax(-1))


def test_packed_copy_follows_the_weight():
    torch.manual_seed(0)
    weight, x = torch.randn(3000, 64), torch.randn(4, 64)
    head = PackedLMHead()
    head.logits(x, weight)
    weight.mul_(-1.0)  # in place: same storage, new version
    torch.testing.assert_close(head.logits(x, weight), F.linear(x, weight), rtol=0, atol=1e-5)
    other = torch.randn(3000, 64)
    torch.testing.assert_close(head.logits(x, other), F.linear(x, other), rtol=0, atol=1e-5)


def test_weights_made_under_inference_mode():
    with torch.inference_mode():
        weight, x = torch.randn(2000, 32), torch.randn(3, 32)
    head = PackedLMHead()
    with torch.inference_mode():
        torch.testing.assert_close(head.logits(x, weight), F.linear(x, weight), rtol=0, atol=1e-5)


def test_other_dtypes_use_linear():
    weight, x = torch.randn(300, 32).bfloat16(), torch.randn(2, 32).bfloat16()
    got = PackedLMHead().logits(x, weight)
    assert got.dtype == torch.float32 and torch.equal(got, F.linear(x, weight).float())
