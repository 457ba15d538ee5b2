"""Load a Llama-family model and its tokenizer from a local Hugging Face checkpoint folder."""

from __future__ import annotations

import copy
import json
import os

import torch
from safetensors.torch import load_file

from .llama import LlamaForCausalLM, ModelConfig, rope_inv_freq

# Checkpoint tensors that are not parameters of ours: KV-cache scales are read by the KV pool.
_KV_SCALE_SUFFIXES = (".k_scale", ".v_scale")


def read_config(path: str) -> ModelConfig:
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise ValueError(f"{path!r} is not a Hugging Face checkpoint folder: it has no config.json")
    with open(config_file) as f:
        return ModelConfig.from_hf(json.load(f))


def read_state_dict(path: str) -> dict[str, torch.Tensor]:
    """Single-file or sharded (model.safetensors.index.json) safetensors."""
    index_file = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index_file):
        with open(index_file) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.isfile(os.path.join(path, "model.safetensors")):
        shards = ["model.safetensors"]
    else:
        raise ValueError(f"{path!r} has no model.safetensors or model.safetensors.index.json")
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(load_file(os.path.join(path, shard)))
    return state


def load_model(path: str, dtype: torch.dtype, device: str) -> tuple[LlamaForCausalLM, dict[str, torch.Tensor]]:
    """Returns the model in eval mode and any KV-cache scale tensors the checkpoint carries."""
    config = read_config(path)
    state = read_state_dict(path)
    kv_scales = {k: state.pop(k) for k in list(state) if k.endswith(_KV_SCALE_SUFFIXES)}
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device=device)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path!r} does not match a {config.architecture}: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    # assign=True keeps the state dict's tensors (read on the CPU): move them where the model runs.
    model = model.to(device=device, dtype=dtype).eval()
    model.rotary.inv_freq = rope_inv_freq(config).to(device)  # rope stays float32, as in HF
    return model, kv_scales


# A folder's parsed tokenizer, by (path, its files' sizes and times): engines started in one process
# (tests, --dp-size) each get a deep copy, about half the cost of parsing a 100k-token vocabulary
# again, and no Rust tokenizer object is shared between engines' threads.
_TOKENIZERS: dict[tuple, object] = {}


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    folder = os.path.abspath(path)
    files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    key = (
        folder,
        *((f, os.stat(os.path.join(folder, f)).st_mtime_ns, os.path.getsize(os.path.join(folder, f))) for f in files),
    )
    if key not in _TOKENIZERS:
        if len(_TOKENIZERS) >= 4:  # a few folders at most (tests write many checkpoints)
            del _TOKENIZERS[next(iter(_TOKENIZERS))]
        _TOKENIZERS[key] = AutoTokenizer.from_pretrained(path)
    return copy.deepcopy(_TOKENIZERS[key])
