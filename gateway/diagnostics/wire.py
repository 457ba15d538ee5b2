"""The diagnostics in the other APIs' own shapes.

`/v1/messages` (Anthropic's `diagnostics.cache_miss_reason`): `null` when nothing reusable was
missed (and for `cold`: nothing to compare with); the four `*_changed` types and
`previous_message_not_found` as Anthropic defines them; radixgate's own reasons as `unavailable`
with extension fields (`radixgate_reason`, `diverged_at_token`, `message_index`), because the
`anthropic` client reads an unknown `type` as its union's first member. A `message_index` counts
Anthropic's `messages` (the system prompt is not one of them).

`/v1/responses` (OpenAI's `prompt_cache_diagnostics`): `cache_hit`; `cache_miss` with `reason`,
`cache_missed_tokens` and `comparison_reusable_tokens` (the prefix the two prompts share);
`comparison_response_not_found`; `unavailable`.
"""

from __future__ import annotations

from typing import Any

ANTHROPIC_TYPES = ("system_changed", "tools_changed", "messages_changed", "model_changed")


def anthropic_diagnostics(result: dict[str, Any] | None, has_system: bool) -> dict[str, Any] | None:
    if result is None:
        return {"cache_miss_reason": {"type": "unavailable"}}
    miss = result["cache_miss_reason"]
    if miss is None or miss["type"] == "cold":
        return None
    kind = miss["type"]
    if kind == "previous_response_not_found":
        return {"cache_miss_reason": {"type": "previous_message_not_found"}}
    if kind == "unavailable":
        return {"cache_miss_reason": {"type": "unavailable"}}
    index = miss["message_index"]
    if index is not None and has_system:
        index = None if index == 0 else index - 1
    where = {"diverged_at_token": miss["diverged_at_token"], "message_index": index}
    missed = miss["cache_missed_input_tokens"]
    if kind in ANTHROPIC_TYPES:
        return {"cache_miss_reason": {"type": kind, "cache_missed_input_tokens": missed, **where}}
    return {"cache_miss_reason": {"type": "unavailable", "radixgate_reason": kind, **where}}


def responses_diagnostics(result: dict[str, Any] | None) -> dict[str, Any]:
    if result is None:
        return {"type": "unavailable"}
    miss = result["cache_miss_reason"]
    if miss is None:
        return {"type": "cache_hit", "cached_tokens": result["cached_tokens"]}
    kind = miss["type"]
    if kind == "previous_response_not_found":
        return {"type": "comparison_response_not_found"}
    if kind == "unavailable":
        return {"type": "unavailable"}
    return {
        "type": "cache_miss",
        "reason": kind,
        "cache_missed_tokens": miss["cache_missed_input_tokens"],
        "comparison_reusable_tokens": miss["diverged_at_token"] or 0,
        "diverged_at_token": miss["diverged_at_token"],
        "message_index": miss["message_index"],
    }
