"""Logprobs in each API's wire format, from the engine's numbers.

The values are the raw log-softmax of the model's logits, before penalties, logit bias, grammar
masks and temperature (vLLM's default `logprobs_mode`). A token's text is the tokenizer's decoding
of that token alone (a piece of a multi-byte character decodes to U+FFFD; `bytes` then holds the
replacement character's bytes, as vLLM reports it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..workers.worker import Worker

MAX_TOP_LOGPROBS = 20  # OpenAI's limit for chat's top_logprobs; the engine's too
TopList = Sequence[tuple[int, float]]  # (token id, logprob), best first


class TokenTexts:
    """Decodes single tokens, each id once per response."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self.cache.get(token_id)
        if text is None:
            text = self.cache[token_id] = self.worker.detokenize([token_id])
        return text


def chat_logprobs(
    texts: TokenTexts, token_ids: Sequence[int], logprobs: Sequence[float], tops: Sequence[TopList], num_top: int
) -> dict[str, Any]:
    """OpenAI chat's `choices[i].logprobs`: `{"content": [...], "refusal": null}`."""

    def entry(token_id: int, value: float) -> dict[str, Any]:
        text = texts(token_id)
        return {"token": text, "logprob": value, "bytes": list(text.encode("utf-8"))}

    content = []
    for token_id, value, top in zip(token_ids, logprobs, tops, strict=True):
        item = entry(token_id, value)
        item["top_logprobs"] = [entry(t, v) for t, v in top[:num_top]]
        content.append(item)
    return {"content": content, "refusal": None}


def completion_logprobs(
    texts: TokenTexts,
    token_ids: Sequence[int],
    logprobs: Sequence[float | None],
    tops: Sequence[TopList | None],
    num_top: int,
    text_offset: int = 0,
) -> dict[str, Any]:
    """OpenAI completions' `choices[i].logprobs`: parallel lists `tokens`, `token_logprobs`,
    `top_logprobs` ({text: logprob}, the token itself included as vLLM does) and `text_offset`."""
    tokens: list[str] = []
    offsets: list[int] = []
    top_dicts: list[dict[str, float] | None] = []
    for token_id, value, top in zip(token_ids, logprobs, tops, strict=True):
        text = texts(token_id)
        tokens.append(text)
        offsets.append(text_offset)
        text_offset += len(text)
        if top is None or value is None:
            top_dicts.append(None)
            continue
        best = {texts(t): v for t, v in top[:num_top]}
        best.setdefault(text, value)
        top_dicts.append(best)
    return {"tokens": tokens, "token_logprobs": list(logprobs), "top_logprobs": top_dicts, "text_offset": offsets}


def sglang_logprobs(
    texts: TokenTexts | None, token_ids: Sequence[int], logprobs: Sequence[float | None], tops: Sequence[TopList | None]
) -> tuple[list[list[Any]], list[list[list[Any]] | None]]:
    """SGLang's `meta_info` lists: `[logprob, token_id, text]` per token and a list of those per
    position for the top alternatives; `text` is None unless `return_text_in_logprobs`."""

    def triple(token_id: int, value: float | None) -> list[Any]:
        return [value, token_id, texts(token_id) if texts is not None else None]

    token_list = [triple(t, v) for t, v in zip(token_ids, logprobs, strict=True)]
    top_list = [None if top is None else [triple(t, v) for t, v in top] for top in tops]
    return token_list, top_list
