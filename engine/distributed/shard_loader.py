"""Loads one rank's shard of a checkpoint: each tensor is sliced as it is read (safetensors
`get_slice`), so a rank never holds the whole model in memory."""

from __future__ import annotations

import os

import torch
from safetensors import safe_open

from ..models.llama import ModelConfig
from ..models.loader import KV_SCALE_SUFFIXES, materialize, read_config, shard_files
from .group import TPGroup
from .layers import ParallelLlamaForCausalLM, kv_head_range, padded_vocab

_COLUMN = (".q_proj.", ".gate_proj.", ".up_proj.")  # split by output rows
_KV = (".k_proj.", ".v_proj.")
_ROW = (".o_proj.weight", ".down_proj.weight")  # split by input columns
_VOCAB = ("embed_tokens.weight", "lm_head.weight")


def _read_slice(tensor_slice, name: str, config: ModelConfig, rank: int, tp: int) -> torch.Tensor:
    """Rank `rank`'s part of the checkpoint tensor `name`."""
    shape = tensor_slice.get_shape()
    if name.endswith(_VOCAB):
        per = padded_vocab(config.vocab_size, tp) // tp
        start, stop = rank * per, min((rank + 1) * per, config.vocab_size)
        part = tensor_slice[start:stop] if start < stop else tensor_slice[0:0]
        pad = per - part.shape[0]  # the padding rows past the vocabulary are zeros
        return torch.cat([part, part.new_zeros(pad, *part.shape[1:])]) if pad else part
    if any(k in name for k in _KV):
        first, last = kv_head_range(config, rank, tp)
        d = config.head_dim
        return tensor_slice[first * d : last * d]
    if any(k in name for k in _COLUMN):
        per = shape[0] // tp
        return tensor_slice[rank * per : (rank + 1) * per]
    if name.endswith(_ROW):
        per = shape[1] // tp
        return tensor_slice[:, rank * per : (rank + 1) * per]
    return tensor_slice[:]  # norms: replicated


def load_shard(
    path: str, rank: int, tp: int, dtype: torch.dtype, device: str, group: TPGroup
) -> tuple[ParallelLlamaForCausalLM, dict[str, torch.Tensor]]:
    """Rank `rank`'s model in eval mode and the checkpoint's KV-cache scales (per layer, every rank)."""
    config = read_config(path)
    state: dict[str, torch.Tensor] = {}
    kv_scales: dict[str, torch.Tensor] = {}
    for file in shard_files(path):
        with safe_open(os.path.join(path, file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                if name.endswith("rotary_emb.inv_freq") or (config.tie_word_embeddings and name == "lm_head.weight"):
                    continue
                if name.endswith(KV_SCALE_SUFFIXES):
                    kv_scales[name] = f.get_tensor(name)
                    continue
                state[name] = _read_slice(f.get_slice(name), name, config, rank, tp)
    with torch.device("meta"):
        model = ParallelLlamaForCausalLM(config, rank, tp, group)
    return materialize(model, state, config, path, dtype, device), kv_scales
