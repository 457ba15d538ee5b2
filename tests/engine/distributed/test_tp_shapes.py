"""How a model's shapes split over ranks: padded vocabulary, KV heads split or replicated, refusals."""

from __future__ import annotations

import dataclasses

import pytest

from radixgate.engine.distributed.layers import check_tp_shape, kv_head_range, padded_vocab, shard_config
from radixgate.engine.models.llama import ModelConfig

BASE = ModelConfig(
    architecture="LlamaForCausalLM",
    vocab_size=100279,
    hidden_size=256,
    intermediate_size=768,
    num_layers=2,
    num_heads=8,
    num_kv_heads=2,
    head_dim=32,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    rope_scaling=None,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    attention_bias=False,
    eos_token_ids=(),
)


def test_the_vocabulary_pads_to_a_multiple_of_tp_times_64():
    assert padded_vocab(100279, 1) == 100288
    assert padded_vocab(100279, 2) == 100352 and padded_vocab(100279, 4) == 100352
    assert shard_config(BASE, 2).vocab_size == 100352 // 2


def test_kv_heads_split_or_replicate_so_each_rank_has_its_query_heads_kv():
    assert [kv_head_range(BASE, r, 2) for r in range(2)] == [(0, 1), (1, 2)]
    assert [kv_head_range(BASE, r, 4) for r in range(4)] == [(0, 1), (0, 1), (1, 2), (1, 2)]  # replicated
    one_kv = dataclasses.replace(BASE, num_kv_heads=1)
    assert {kv_head_range(one_kv, r, 8) for r in range(8)} == {(0, 1)}
    for tp in (2, 4, 8):
        q_per_rank = BASE.num_heads // tp
        group = BASE.num_heads // BASE.num_kv_heads  # query heads per KV head
        for rank in range(tp):
            first, last = kv_head_range(BASE, rank, tp)
            heads = range(rank * q_per_rank, (rank + 1) * q_per_rank)
            assert all(first <= h // group < last for h in heads)
    local = shard_config(BASE, 4)
    assert (local.num_heads, local.num_kv_heads, local.intermediate_size) == (2, 1, 192)


@pytest.mark.parametrize(
    ("change", "tp", "message"),
    [
        ({"num_heads": 7, "num_kv_heads": 7}, 2, "7 query heads"),
        ({"num_heads": 12, "num_kv_heads": 3}, 2, "3 KV heads"),
        ({"num_heads": 8, "num_kv_heads": 2, "intermediate_size": 770}, 4, "intermediate_size=770"),
    ],
)
def test_shapes_that_do_not_split_are_refused(change, tp, message):
    with pytest.raises(ValueError, match=message):
        check_tp_shape(dataclasses.replace(BASE, **change), tp)
    check_tp_shape(dataclasses.replace(BASE, **change), 1)  # TP=1 takes any shape
