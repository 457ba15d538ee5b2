"""The built-in `tiny` model: a small random-weight Llama checkpoint with a real BPE tokenizer.

Generated deterministically from a fixed seed on first use and written as an ordinary Hugging Face
checkpoint (config.json, model.safetensors, tokenizer.json) into the cache folder, then loaded
through the same path as any other checkpoint. Its weights are random: its text is noise, but its
shapes, token counts and timings behave like a real model's."""

from __future__ import annotations

import os
import tempfile

from ..tiny_tokenizer import (
    CHAT_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    IM_START,
    TINY_NAME,
    TINY_SEED,
    TINY_SHAPE,
    TINY_VERSION,
    build_cl100k_tokenizer,
    tiny_checkpoint_dir,
)

__all__ = [
    "CHAT_TEMPLATE",
    "ENDOFTEXT",
    "IM_END",
    "IM_START",
    "TINY_NAME",
    "TINY_SEED",
    "TINY_SHAPE",
    "TINY_VERSION",
    "build_cl100k_tokenizer",
    "ensure_tiny_checkpoint",
    "tiny_checkpoint_dir",
    "write_random_checkpoint",
]


def ensure_tiny_checkpoint() -> str:
    """Returns the folder of the tiny checkpoint, writing it first if it is not there yet."""
    path = tiny_checkpoint_dir()
    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Written to a temporary folder and renamed, so a crash or a concurrent writer never leaves half a checkpoint.
    tmp = tempfile.mkdtemp(prefix="tiny-", dir=os.path.dirname(path))
    tokenizer = build_cl100k_tokenizer()
    write_random_checkpoint(
        tmp,
        "llama",
        vocab_size=len(tokenizer),
        tokenizer=tokenizer,
        eos_token_id=[tokenizer.convert_tokens_to_ids(ENDOFTEXT), tokenizer.convert_tokens_to_ids(IM_END)],
        tie_word_embeddings=True,
        seed=TINY_SEED,
        initializer_range=0.05,
        **TINY_SHAPE,
    )
    try:
        os.rename(tmp, path)
    except OSError:  # another process won the race; its checkpoint is identical
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return path


def write_random_checkpoint(
    path: str,
    architecture: str,
    *,
    vocab_size: int,
    tokenizer=None,
    seed: int = 0,
    dtype: str = "float32",
    **config_kwargs,
) -> str:
    """Writes a random-weight Hugging Face checkpoint with `save_pretrained` (llama, qwen2 or mistral)."""
    import torch
    import transformers

    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[architecture]
    config = config_cls(vocab_size=vocab_size, **config_kwargs)
    torch.manual_seed(seed)
    model = model_cls(config).to(getattr(torch, dtype))
    model.save_pretrained(path, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path
