"""Megatron-style tensor-parallel layers and the Llama-family model split over `tp_size` ranks.

| weight                          | split                                  | after the layer                 |
|---------------------------------|----------------------------------------|---------------------------------|
| q/k/v_proj, gate/up_proj        | by output rows (column-parallel)       | nothing: heads stay on the rank |
| o_proj, down_proj               | by input columns (row-parallel)        | all-reduce, then the bias once  |
| embed_tokens                    | by vocabulary rows (padded)            | all-reduce of masked lookups    |
| lm_head                         | by vocabulary rows (padded)            | gather of the logits to rank 0  |
| norms, rotary                   | replicated                             |                                 |

KV heads are split like the query heads; with fewer KV heads than ranks each rank keeps the one
KV head its query heads read (replicated). Every rank's residual stream is identical after each
all-reduce, so the ranks never drift apart."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..models.llama import DecoderLayer, LlamaForCausalLM, ModelConfig
from .group import TPGroup

VOCAB_PAD = 64  # the vocabulary is padded to a multiple of tp_size * VOCAB_PAD rows


def check_tp_shape(config: ModelConfig, tp_size: int) -> None:
    """Raises ValueError when this model cannot be split over `tp_size` ranks (before anything starts)."""
    if tp_size == 1:
        return
    if config.num_heads % tp_size:
        raise ValueError(
            f"tp_size={tp_size} does not divide the model's {config.num_heads} query heads "
            f"(num_attention_heads={config.num_heads}): choose a tp_size that divides {config.num_heads}"
        )
    kv = config.num_kv_heads
    if (kv >= tp_size and kv % tp_size) or (kv < tp_size and tp_size % kv):
        raise ValueError(
            f"tp_size={tp_size} cannot split or replicate the model's {kv} KV heads: "
            "one must divide the other (num_key_value_heads)"
        )
    if config.intermediate_size % tp_size:
        raise ValueError(f"tp_size={tp_size} does not divide intermediate_size={config.intermediate_size}")


def padded_vocab(vocab_size: int, tp_size: int) -> int:
    multiple = tp_size * VOCAB_PAD
    return -(-vocab_size // multiple) * multiple


def local_kv_heads(config: ModelConfig, tp_size: int) -> int:
    """KV heads each rank holds (and caches): a share of them, or one replicated head."""
    return max(config.num_kv_heads // tp_size, 1)


def kv_head_range(config: ModelConfig, rank: int, tp_size: int) -> tuple[int, int]:
    """The KV heads rank `rank` holds: [first, last)."""
    kv = config.num_kv_heads
    if kv >= tp_size:
        per = kv // tp_size
        return rank * per, (rank + 1) * per
    head = rank // (tp_size // kv)  # the KV head this rank's query heads read
    return head, head + 1


def shard_config(config: ModelConfig, tp_size: int) -> ModelConfig:
    """The shapes one rank builds: its heads, its MLP columns, its slice of the padded vocabulary."""
    return dataclasses.replace(
        config,
        num_heads=config.num_heads // tp_size,
        num_kv_heads=local_kv_heads(config, tp_size),
        intermediate_size=config.intermediate_size // tp_size,
        vocab_size=padded_vocab(config.vocab_size, tp_size) // tp_size,
    )


class RowParallelLinear(nn.Linear):
    """y = all_reduce(x_local @ W_local^T) + b: the input features are split over the ranks and
    the bias, kept whole on every rank, is added once after the sum."""

    def __init__(self, in_features: int, out_features: int, bias: bool, group: TPGroup):
        super().__init__(in_features, out_features, bias=bias)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.group.all_reduce(F.linear(x, self.weight))
        return out + self.bias if self.bias is not None else out


class VocabParallelEmbedding(nn.Embedding):
    """Rows [vocab_start, vocab_start + num_embeddings) of the padded table; ids outside the range
    look up zeros, and the all-reduce leaves every rank with every id's row."""

    def __init__(self, num_embeddings: int, embedding_dim: int, vocab_start: int, group: TPGroup):
        super().__init__(num_embeddings, embedding_dim)
        self.vocab_start, self.group = vocab_start, group

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        local = input_ids - self.vocab_start
        outside = (local < 0) | (local >= self.num_embeddings)
        x = F.embedding(local.masked_fill(outside, 0), self.weight)
        return self.group.all_reduce(x.masked_fill(outside[:, None], 0.0))


class ParallelLlamaForCausalLM(LlamaForCausalLM):
    """One rank's shard of a Llama-family model. Parameter names are the checkpoint's, with the
    shapes of `shard_config`. On rank 0 `before_forward` broadcasts the step's batch to the other
    ranks, so every rank runs the same forward, and `on_collective_error` names a rank that died;
    rank 0 gets the whole vocabulary's logits."""

    def __init__(self, config: ModelConfig, rank: int, tp_size: int, group: TPGroup):
        super().__init__(shard_config(config, tp_size))
        self.full_config, self.rank, self.tp_size, self.group = config, rank, tp_size, group
        self.before_forward: Callable[[torch.Tensor, torch.Tensor, Any, torch.Tensor], None] | None = None
        self.on_collective_error: Callable[[BaseException], None] | None = None
        local = self.config
        hidden = config.hidden_size
        self.model.embed_tokens = VocabParallelEmbedding(local.vocab_size, hidden, rank * local.vocab_size, group)
        for layer in self.model.layers:
            assert isinstance(layer, DecoderLayer)
            attn, mlp = layer.self_attn, layer.mlp
            attn.o_proj = RowParallelLinear(local.num_heads * local.head_dim, hidden, False, group)
            mlp.down_proj = RowParallelLinear(local.intermediate_size, hidden, False, group)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, ctx, sample_indices: torch.Tensor
    ) -> torch.Tensor:
        """As `LlamaForCausalLM.forward`; rank 0 returns logits [n, vocab], other ranks their slice."""
        try:
            if self.before_forward is not None:
                self.before_forward(input_ids, positions, ctx, sample_indices)
            x = self.model.embed_tokens(input_ids)
            cos, sin = self.rotary(positions, x.dtype)
            for layer in self.model.layers:
                x = layer(x, cos, sin, ctx)
            x = self.model.norm(x[sample_indices])
            local = self.lm_head_packed.logits(x, self.lm_head.weight)  # [n, padded vocab / tp]
            logits = self.group.gather_last_dim(local)
        except RuntimeError as e:  # a collective failed: say which rank died, when one did
            if self.on_collective_error is not None:
                self.on_collective_error(e)
            raise
        if logits is None:
            return local
        # the padding rows are not tokens: cut off, so the sampler never sees them
        return logits[:, : self.full_config.vocab_size]
