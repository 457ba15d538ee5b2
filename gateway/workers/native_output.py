"""SGLang's native `/generate` answer read back: the last event's `meta_info` to a `GenerateOutput`,
logprobs included when they were asked for."""

from __future__ import annotations

from typing import Any

from radixgate.engine.protocol import GenerateOutput, GenerateRequest, TopLogprobs


def logprob_values(triples: list[list[Any]]) -> list[Any]:
    """SGLang's `[logprob, token_id, text]` entries to the logprobs alone."""
    return [entry[0] for entry in triples]


def top_pairs(lists: list[list[list[Any]] | None] | None) -> list[Any]:
    """SGLang's per-position top lists to `(token id, logprob)` pairs (None where a position has none)."""
    return [None if top is None else [(entry[1], entry[0]) for entry in top] for top in lists or ()]


def output_logprobs(meta: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The output logprobs and top lists an event's `meta_info` carries so far."""
    return logprob_values(meta["output_token_logprobs"]), top_pairs(meta.get("output_top_logprobs"))


def native_output(request: GenerateRequest, ids: list[int], text: str, meta: dict[str, Any]) -> GenerateOutput:
    """The final result from SGLang's last `meta_info`, logprobs included when they were asked for."""
    out = GenerateOutput(
        request.rid, ids, text, meta["prompt_tokens"], meta["cached_tokens"], meta["finish_reason"]["type"]
    )
    out.cache_pins = list(meta.get("cache_pins") or [])  # what became of each asked pin
    if request.sampling.return_logprob and meta.get("output_token_logprobs") is not None:
        out.output_token_logprobs, out.output_top_logprobs = output_logprobs(meta)
        out.input_token_logprobs = logprob_values(meta.get("input_token_logprobs") or [])
        prompt_tops: list[TopLogprobs | None] = top_pairs(meta.get("input_top_logprobs"))
        out.input_top_logprobs = prompt_tops
    return out
