"""What each `SamplingParams` field may hold: its kind, and the range the engine can honour.

`SamplingParams.__post_init__` calls `check_field_kinds` before its own range checks, so that every
value reaching the engine loop is of its field's type, finite, and within what the tensors and
generators built from it accept (a request the loop cannot honour is refused here, on the caller's
thread, with a ValueError naming the field; it never reaches the loop):

| kind        | fields                                   | accepted                                          |
|-------------|------------------------------------------|---------------------------------------------------|
| `int`       | max_new_tokens, top_k, min_new_tokens,   | an int (not a bool) in int64                      |
|             | top_logprobs_num, logprob_start_len      |                                                   |
| `float`     | temperature, top_p, min_p, penalties     | an int or float (not a bool), finite              |
| `bool`      | ignore_eos, return_logprob, ...          | a bool                                            |
| `seed`      | seed                                     | None or an int in [-2**63, 2**64 - 1]: what       |
|             |                                          | `torch.Generator.manual_seed` takes (a negative   |
|             |                                          | seed is taken modulo 2**64, as torch does)        |
| `text`      | json_schema, regex, ebnf                 | None or a str that encodes to UTF-8               |
| `stop`      | stop                                     | None, a str or a list of str, all UTF-8-encodable |
| `token_ids` | stop_token_ids                           | None or a list of ints in int64                   |
| `bias`      | logit_bias                               | None or a dict int -> finite float                |
| `pins`      | cache_pins                               | a tuple of (int prefix tokens, finite ttl s)      |
| `credit`    | cache_credit                             | () or a pair of ints (prefix tokens, requests)    |

Whether token ids are inside the vocabulary is checked where the vocabulary is known
(`scheduler/request.py`'s `check_request`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import fields
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SEED_MIN, SEED_MAX = INT64_MIN, 2**64 - 1
SEED_MODULUS = 2**64
FLOAT_MAX = sys.float_info.max

FIELD_KINDS: dict[str, str] = {
    "max_new_tokens": "int",
    "temperature": "float",
    "top_p": "float",
    "top_k": "int",
    "min_p": "float",
    "seed": "seed",
    "stop": "stop",
    "stop_token_ids": "token_ids",
    "ignore_eos": "bool",
    "frequency_penalty": "float",
    "presence_penalty": "float",
    "repetition_penalty": "float",
    "logit_bias": "bias",
    "min_new_tokens": "int",
    "return_logprob": "bool",
    "top_logprobs_num": "int",
    "logprob_start_len": "int",
    "skip_special_tokens": "bool",
    "json_schema": "text",
    "regex": "text",
    "ebnf": "text",
    "json_any_whitespace": "bool",
    "priority": "int",
    "cache_pins": "pins",
    "cache_credit": "credit",
}


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_int64(value: Any) -> bool:
    return is_int(value) and INT64_MIN <= value <= INT64_MAX


def is_finite_number(value: Any) -> bool:
    if is_int(value):
        return abs(value) <= FLOAT_MAX  # a larger int is infinite as the float every kernel reads
    return isinstance(value, float) and math.isfinite(value)


def is_utf8(text: str) -> bool:
    """False for a str holding a lone surrogate (JSON's "\\ud800"), which no tokenizer can encode."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def torch_seed(seed: int) -> int:
    """The seed as `torch.Generator.manual_seed` keeps it: in [0, 2**64)."""
    return seed % SEED_MODULUS


def _shown(value: Any) -> str:
    """The value for an error message: short, and safe for ints too long to print."""
    if is_int(value) and abs(value) >= 10**30:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except ValueError:  # holds an int past Python's 4300-digit printing limit
        return f"a {type(value).__name__} holding an integer too long to print"
    return text if len(text) <= 80 else text[:77] + "..."


def _check_one(name: str, kind: str, value: Any) -> None:
    if kind == "int":
        if not is_int64(value):
            raise ValueError(f"{name} must be an integer in [{INT64_MIN}, {INT64_MAX}], got {_shown(value)}")
    elif kind == "float":
        if not is_finite_number(value):
            raise ValueError(f"{name} must be a finite number, got {_shown(value)}")
    elif kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {_shown(value)}")
    elif kind == "seed":
        if value is not None and not (is_int(value) and SEED_MIN <= value <= SEED_MAX):
            raise ValueError(
                f"seed must be an integer in [{SEED_MIN}, {SEED_MAX}] (what torch's generator takes), "
                f"got {_shown(value)}"
            )
    elif kind == "text":
        if value is not None and not (isinstance(value, str) and is_utf8(value)):
            raise ValueError(f"{name} must be valid Unicode text (no lone surrogates), got {_shown(value)}")
    elif kind == "stop":
        items = [value] if isinstance(value, str) else value
        if value is not None and not (
            isinstance(items, list) and all(isinstance(s, str) and is_utf8(s) for s in items)
        ):
            raise ValueError(f"stop must be a string or a list of strings of valid Unicode, got {_shown(value)}")
    elif kind == "token_ids":
        if value is not None and not (isinstance(value, list) and all(is_int64(t) for t in value)):
            raise ValueError(f"{name} must be a list of integer token ids, got {_shown(value)}")
    elif kind == "bias":
        if value is not None and not (
            isinstance(value, dict) and all(is_int64(k) and is_finite_number(v) for k, v in value.items())
        ):
            raise ValueError(f"{name} must map integer token ids to finite numbers, got {_shown(value)}")
    elif kind == "pins":
        if not (
            isinstance(value, tuple)
            and all(isinstance(p, tuple) and len(p) == 2 and is_int64(p[0]) and is_finite_number(p[1]) for p in value)
        ):
            raise ValueError(f"{name} must be a list of [prefix tokens, ttl seconds] pairs, got {_shown(value)}")
    elif kind == "credit":
        if not (isinstance(value, tuple) and len(value) in (0, 2) and all(is_int64(v) for v in value)):
            raise ValueError(f"{name} must be [] or [prefix tokens, requests], got {_shown(value)}")
    else:
        raise AssertionError(f"unknown field kind {kind!r} for {name}")


def check_field_kinds(params: Any) -> None:
    """Raises ValueError naming the first field of `params` (a SamplingParams) that holds a value
    of the wrong kind or out of the range the engine can honour."""
    for f in fields(params):
        kind = FIELD_KINDS.get(f.name)
        assert kind is not None, f"SamplingParams.{f.name} has no kind in FIELD_KINDS: add it"
        _check_one(f.name, kind, getattr(params, f.name))
