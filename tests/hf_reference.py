"""What `transformers` computes for the same checkpoint: the references the engine's outputs are held to.
Each checkpoint's model loads once per test process (and each greedy answer is computed once): the
references are read-only, and reloading a model for every parametrisation cost seconds each."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=8)
def hf_model(path: str):  # -> transformers.PreTrainedModel, in eval mode, float32
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def hf_embeddings(path: str, prompts: list[list[int]]) -> torch.Tensor:
    """Each prompt's last-token final hidden state (the backbone's output, after its final norm),
    L2-normalised: [len(prompts), hidden] float32, one prompt at a time (no padding)."""
    model = hf_model(path)
    rows = []
    with torch.no_grad():
        for ids in prompts:
            hidden = model.model(torch.tensor([ids])).last_hidden_state  # [1, T, hidden]
            rows.append(torch.nn.functional.normalize(hidden[0, -1].float(), dim=-1))
    return torch.stack(rows)


def hf_greedy(path: str, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Hugging Face `generate`'s greedy tokens after each prompt, one prompt at a time (no padding)."""
    return [list(_greedy_one(path, tuple(ids), new_tokens)) for ids in prompts]


@functools.lru_cache(maxsize=256)
def _greedy_one(path: str, ids: tuple[int, ...], new_tokens: int) -> tuple[int, ...]:
    with torch.no_grad():
        gen = hf_model(path).generate(
            torch.tensor([ids]), max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False
        )
    return tuple(gen[0, len(ids) :].tolist())
