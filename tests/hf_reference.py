"""What `transformers` computes for the same checkpoint: the references the engine's outputs are held to."""

from __future__ import annotations

import torch


def hf_embeddings(path: str, prompts: list[list[int]]) -> torch.Tensor:
    """Each prompt's last-token final hidden state (the backbone's output, after its final norm),
    L2-normalised: [len(prompts), hidden] float32, one prompt at a time (no padding)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = []
    with torch.no_grad():
        for ids in prompts:
            hidden = model.model(torch.tensor([ids])).last_hidden_state  # [1, T, hidden]
            rows.append(torch.nn.functional.normalize(hidden[0, -1].float(), dim=-1))
    return torch.stack(rows)
