"""Load a Llama-family model and its tokenizer from a local Hugging Face checkpoint folder."""

from __future__ import annotations

import copy
import json
import os
import threading
from typing import TypeVar

import torch
from safetensors.torch import load_file

from ..config import _env
from .llama import LlamaForCausalLM, ModelConfig, rope_inv_freq

# Checkpoint tensors that are not parameters of ours: KV-cache scales are read by the KV pool.
KV_SCALE_SUFFIXES = (".k_scale", ".v_scale")


def read_config(path: str) -> ModelConfig:
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise ValueError(f"{path!r} is not a Hugging Face checkpoint folder: it has no config.json")
    with open(config_file) as f:
        return ModelConfig.from_hf(json.load(f))


def shard_files(path: str) -> list[str]:
    """The checkpoint's safetensors files: single-file or sharded (model.safetensors.index.json)."""
    index_file = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index_file):
        with open(index_file) as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return ["model.safetensors"]
    raise ValueError(f"{path!r} has no model.safetensors or model.safetensors.index.json")


def read_state_dict(path: str) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for shard in shard_files(path):
        state.update(load_file(os.path.join(path, shard)))
    return state


M = TypeVar("M", bound=LlamaForCausalLM)


def materialize(model: M, state: dict[str, torch.Tensor], config: ModelConfig, path: str, dtype, device: str) -> M:
    """`model` built on the meta device takes `state`'s tensors (all of its parameters but a tied LM
    head, nothing else), ties the embeddings, and moves to `device` and `dtype`, in eval mode."""
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
    return model


def load_model(path: str, dtype: torch.dtype, device: str) -> tuple[LlamaForCausalLM, dict[str, torch.Tensor]]:
    """Returns the model in eval mode and any KV-cache scale tensors the checkpoint carries."""
    config = read_config(path)
    state = read_state_dict(path)
    kv_scales = {k: state.pop(k) for k in list(state) if k.endswith(KV_SCALE_SUFFIXES)}
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    return materialize(model, state, config, path, dtype, device), kv_scales


# A folder's parsed tokenizer, by (path, its files' sizes and times): engines started in one process
# (tests, --dp-size) each get a deep copy, about half the cost of parsing a 100k-token vocabulary
# again, and no Rust tokenizer object is shared between engines' threads. RADIXGATE_SHARE_TOKENIZER=1
# (the test suite sets it) hands every engine the one parsed tokenizer instead: engines only encode and
# decode without truncation or padding, which never mutates it.
# The lock also serialises the first `from transformers import AutoTokenizer`: transformers' lazy
# module, imported from two threads at once (two engines starting), can fail with an ImportError.
_TOKENIZERS: dict[tuple, object] = {}
_TOKENIZERS_LOCK = threading.Lock()


def load_tokenizer(path: str):
    folder = os.path.abspath(path)
    files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    stats = [(f, os.stat(os.path.join(folder, f))) for f in files]
    key = (folder, *((f, st.st_mtime_ns, st.st_size) for f, st in stats))
    with _TOKENIZERS_LOCK:
        if key not in _TOKENIZERS:
            from transformers import AutoTokenizer

            if len(_TOKENIZERS) >= 4:  # a few folders at most (tests write many checkpoints)
                del _TOKENIZERS[next(iter(_TOKENIZERS))]
            _TOKENIZERS[key] = AutoTokenizer.from_pretrained(path)
        tokenizer = _TOKENIZERS[key]
        return tokenizer if _env("SHARE_TOKENIZER") == "1" else copy.deepcopy(tokenizer)
