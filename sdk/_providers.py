"""Hosted providers' own cache controls, from one `Prompt`.

- **OpenAI** caches prompt prefixes by itself from 1,024 tokens on; requests that share a
  ``prompt_cache_key`` are routed to the same cache. `openai_cache_hints` sets the key to the
  static-prefix hash, so every request of a template lands where its prefix is.
- **Anthropic** caches nothing unless a content block carries ``cache_control``: at most four such
  breakpoints per request, each caching the prefix that ends there, and only when that prefix
  reaches the model's minimum length. `to_anthropic` builds a Messages API request (the keyword
  arguments of ``client.messages.create``) with breakpoints at the ends of the prompt's cacheable
  segments (STATIC, SHARED, SESSION) within those limits, using the cl100k token estimate.

Both warn (`ShortStaticPrefixWarning`) when the static prefix is below the provider's minimum,
since no request of the template can then hit. No `anthropic` or `openai` import is needed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._segments import Volatility
from ._wire import OPENAI_MIN_CACHE_TOKENS, count_tokens

if TYPE_CHECKING:
    from ._prompt import Prompt

__all__ = [
    "ANTHROPIC_MAX_BREAKPOINTS",
    "ANTHROPIC_MIN_CACHE_TOKENS",
    "ANTHROPIC_MIN_CACHE_TOKENS_AS_OF",
    "anthropic_min_cache_tokens",
    "openai_cache_hints",
    "to_anthropic",
]

ANTHROPIC_MAX_BREAKPOINTS = 4

# Minimum cacheable prompt length per model, by model-id prefix (the longest matching prefix wins),
# from Anthropic's prompt-caching documentation. Models not listed get the largest minimum, so a
# breakpoint is never placed where it would silently cache nothing.
ANTHROPIC_MIN_CACHE_TOKENS_AS_OF = "2026-12-01"
ANTHROPIC_MIN_CACHE_TOKENS: dict[str, int] = {
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-sonnet-4-6": 1024,
    "claude-sonnet-4-5": 1024,
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
    "claude-sonnet-4": 1024,
    "claude-3-7-sonnet": 1024,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
_UNKNOWN_MODEL_MIN = max(ANTHROPIC_MIN_CACHE_TOKENS.values())

_ROLES = ("user", "assistant")


def anthropic_min_cache_tokens(model: str) -> int:
    """The fewest tokens a prefix needs before `model` caches it (see the dated table)."""
    matches = [prefix for prefix in ANTHROPIC_MIN_CACHE_TOKENS if model.startswith(prefix)]
    return ANTHROPIC_MIN_CACHE_TOKENS[max(matches, key=len)] if matches else _UNKNOWN_MODEL_MIN


def openai_cache_hints(prompt: Prompt, *, warn: bool = True) -> dict[str, str]:
    """``{"prompt_cache_key": <static-prefix hash>}`` for an OpenAI request (``extra_body`` or
    keyword): prompts that differ only after their static part share it. Warns when the static
    prefix is under OpenAI's 1,024-token minimum."""
    if warn:
        prompt.check_cacheable(OPENAI_MIN_CACHE_TOKENS)
    return {"prompt_cache_key": prompt.static_prefix_hash}


@dataclass
class _Candidate:
    """A block that ends a cacheable segment, and the estimated tokens up to its end."""

    block: dict[str, Any]
    volatility: Volatility
    prefix_tokens: int


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def to_anthropic(
    prompt: Prompt,
    *,
    model: str,
    max_tokens: int,
    ttl: str | None = None,
    warn: bool = True,
    **params: Any,
) -> dict[str, Any]:
    """A Messages API request for `prompt`: ``client.messages.create(**to_anthropic(...))``.

    STATIC and SHARED segments become the ``system`` blocks (one per segment), SESSION history the
    first messages, TURN segments the last user message. ``cache_control`` goes on at most four
    segment ends whose prefix reaches `model`'s minimum: first the last segment of each volatility
    level (the prefixes other requests share), then other segment ends, latest first. `ttl`
    (``"5m"`` or ``"1h"``) is passed on in ``cache_control``; `params` (``temperature``, ...) are
    added to the request as they are."""
    minimum = anthropic_min_cache_tokens(model)
    if warn:
        prompt.check_cacheable(minimum)
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    candidates: list[_Candidate] = []
    num_tokens = 0
    turn: list[str] = []
    for segment in prompt.segments:
        if segment.volatility == Volatility.TURN:
            if segment.text:
                turn.append(segment.text)
            continue
        blocks: list[dict[str, Any]] = []
        if segment.volatility == Volatility.SESSION:
            for message in segment.messages:
                if message.get("role") not in _ROLES:
                    raise ValueError(
                        f"history message with role {message.get('role')!r}: Anthropic's messages are "
                        "'user' or 'assistant' only; put system text in a system() segment"
                    )
                block = _text_block(str(message.get("content") or ""))
                messages.append({"role": message["role"], "content": [block]})
                num_tokens += count_tokens(block["text"])
                blocks.append(block)
        elif segment.text:
            block = _text_block(segment.text)
            system.append(block)
            num_tokens += count_tokens(segment.text)
            blocks.append(block)
        if blocks:
            candidates.append(_Candidate(blocks[-1], segment.volatility, num_tokens))
    if turn:
        block = _text_block("\n\n".join(turn))
        if messages and messages[-1]["role"] == "user":
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": "user", "content": [block]})
    if not messages or messages[-1]["role"] != "user":
        raise ValueError("an Anthropic request ends with a user message: add a user(...) segment")
    cache_control: dict[str, Any] = {"type": "ephemeral"}
    if ttl is not None:
        cache_control["ttl"] = ttl
    for candidate in _breakpoints(candidates, minimum):
        candidate.block["cache_control"] = dict(cache_control)
    request: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if system:
        request["system"] = system
    request["messages"] = messages
    request.update(params)
    return request


def _breakpoints(candidates: list[_Candidate], minimum: int) -> list[_Candidate]:
    eligible = [c for c in candidates if c.prefix_tokens >= minimum]
    ends_of_levels = [
        c for i, c in enumerate(eligible) if i + 1 == len(eligible) or eligible[i + 1].volatility != c.volatility
    ]
    chosen = ends_of_levels[-ANTHROPIC_MAX_BREAKPOINTS:]
    for candidate in reversed(eligible):
        if len(chosen) >= ANTHROPIC_MAX_BREAKPOINTS:
            break
        if all(candidate is not c for c in chosen):
            chosen.append(candidate)
    return chosen
