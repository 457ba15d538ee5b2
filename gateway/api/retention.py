"""Request priority and TTL pins as each API spells them, to `SamplingParams.priority` and
`SamplingParams.cache_pins` ((prefix tokens, ttl seconds) pairs), and what the answer says back.

| API                   | priority                | pin                                                        |
|-----------------------|-------------------------|------------------------------------------------------------|
| `/generate`           | `priority` (SGLang's)   | `cache_ttl` (the whole prompt), `cache_pins` (the native   |
|                       |                         | encoding: `[[prefix tokens, ttl seconds], ...]`)           |
| chat, completions     | `priority` (vLLM's)     | `prompt_cache_options.ttl` (the whole prompt)              |
| `/v1/responses`       | 400 (no such field)     | `prompt_cache_options.ttl` (the whole prompt)              |
| `/v1/messages`        | 400 (no such field)     | `cache_control.ttl` on each breakpoint (its prefix)        |

`prompt_cache_retention` (`in_memory`: 1h, `24h`) caps every pin of its request and pins nothing
itself. Whether each pin was honoured comes back in the answer's `cache_pins` list. `/generate`'s
`cache_credit` ([prefix tokens, requests]) is what a front gives its radixgate workers for a
returning template's static prefix (`--radix-eviction-policy template`; gateway/generation.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from radixgate.engine.protocol import MAX_PIN_TTL_S, check_cache_credit
from radixgate.engine.sampling_fields import is_int64

from .errors import APIError

TTL_FORMS = "'<n>s', '<n>m' or '<n>h' (such as '5m', '30m', '1h'), at most 24h"
ANTHROPIC_TTLS = {"5m": 300.0, "1h": 3600.0}
RETENTION_CAPS = {"in_memory": 3600.0, "24h": 24 * 3600.0}
_TTL = re.compile(r"^([1-9][0-9]*)([smh])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


def ttl_seconds(value: Any, param: str, *, numbers: bool = False) -> float:
    """`value` ("5m", "1h", "90s", or with `numbers` a count of seconds) in seconds; a 400 naming
    `param` and the accepted forms otherwise."""
    seconds = None
    if isinstance(value, str) and (m := _TTL.match(value)):
        seconds = int(m.group(1)) * _UNIT_S[m.group(2)]
    elif numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    if seconds is None or not 0 < seconds <= MAX_PIN_TTL_S:
        accepted = TTL_FORMS + (", or a number of seconds" if numbers else "")
        raise APIError(400, f"'{param}' must be {accepted}; got {value!r}", param=param, code="invalid_value")
    return seconds


def priority_of(value: Any, param: str = "priority") -> int:
    """The request's priority (an integer; higher is served first unless the server runs vLLM's order)."""
    if value is None:
        return 0
    if not is_int64(value):
        raise APIError(400, f"'{param}' must be an integer; got {value!r}", param=param, code="invalid_value")
    return int(value)


def retention_cap(value: Any, param: str = "prompt_cache_retention") -> float:
    """`prompt_cache_retention`'s maximum, in seconds (it caps pins and never pins)."""
    if value is None:
        return MAX_PIN_TTL_S
    if value not in RETENTION_CAPS:
        raise APIError(400, f"'{param}' must be 'in_memory' or '24h'; got {value!r}", param=param, code="invalid_value")
    return RETENTION_CAPS[value]


def options_ttl(
    options: Any, param: str = "prompt_cache_options", allowed: tuple[str, ...] | None = None
) -> float | None:
    """OpenAI's `prompt_cache_options.ttl` in seconds, or None when not asked for; with `allowed`,
    any other key is a 400 naming it."""
    if options is not None and not isinstance(options, dict):
        raise APIError(400, f"'{param}' must be an object", param=param, code="invalid_value")
    for key in options or {}:
        if allowed is not None and key not in allowed:
            raise APIError(400, f"'{param}.{key}' is not supported here; send only {allowed}", param=f"{param}.{key}")
    value = (options or {}).get("ttl")
    return None if value is None else ttl_seconds(value, f"{param}.ttl")


def whole_prompt_pin(ttl_s: float | None, num_tokens: int, cap_s: float) -> tuple[tuple[int, float], ...]:
    """A pin over the whole prompt, capped by retention."""
    return () if ttl_s is None else ((num_tokens, min(ttl_s, cap_s)),)


def native_pins(extra: dict[str, Any], num_tokens: int) -> tuple[tuple[int, float], ...]:
    """`/generate`'s `cache_ttl` (the whole prompt) and `cache_pins` (the native encoding)."""
    pins: list[tuple[int, float]] = []
    if extra.get("cache_ttl") is not None:
        pins.append((num_tokens, ttl_seconds(extra["cache_ttl"], "cache_ttl", numbers=True)))
    raw = extra.get("cache_pins")
    if raw is not None:
        if not isinstance(raw, list) or not all(isinstance(p, list) and len(p) == 2 for p in raw):
            raise APIError(400, "'cache_pins' must be a list of [prefix tokens, ttl seconds] pairs", param="cache_pins")
        for i, (tokens, ttl) in enumerate(raw):
            if not is_int64(tokens) or tokens < 1:
                raise APIError(400, f"'cache_pins.{i}': prefix tokens must be an integer >= 1", param="cache_pins")
            pins.append((tokens, ttl_seconds(ttl, f"cache_pins.{i}", numbers=True)))
    return tuple(pins)


def native_credit(extra: dict[str, Any]) -> tuple[int, ...]:
    """`/generate`'s `cache_credit`: [prefix tokens, requests], what a front sends its radixgate
    workers for a returning template's static prefix (`SamplingParams.cache_credit`)."""
    raw = extra.get("cache_credit")
    if raw is None or raw == []:
        return ()
    if not (isinstance(raw, list) and len(raw) == 2 and all(is_int64(v) for v in raw)):
        raise APIError(400, f"'cache_credit' must be [prefix tokens, requests]; got {raw!r}", param="cache_credit")
    try:
        check_cache_credit(raw[0], raw[1])
    except ValueError as exc:
        raise APIError(400, str(exc), param="cache_credit") from None
    return (raw[0], raw[1])


def breakpoint_pins(marks: Sequence[int], ttls: Iterable[str]) -> tuple[tuple[int, float], ...]:
    """Anthropic's breakpoints: each one's prefix pinned for its `ttl` (checked already: 5m or 1h)."""
    return tuple((mark, ANTHROPIC_TTLS[ttl]) for mark, ttl in zip(marks, ttls, strict=True) if mark > 0)


def pins_answer(output: Any) -> dict[str, Any]:
    """`{"cache_pins": [...]}` (one entry per asked pin: tokens, ttl_s, pinned, reason) for an answer
    whose request asked for pins, else nothing."""
    pins = list(getattr(output, "cache_pins", None) or [])
    return {"cache_pins": pins} if pins else {}
