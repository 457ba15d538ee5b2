"""The comparison behind `cache_diagnostics`: the current prompt's token ids against an earlier
sequence the engine received (its prompt plus the tokens it generated, all of which it cached), and
what the engine matched, mapped to a reason.

With `n` the current prompt's length, `m` the compared sequence's, `L` their shared prefix, `C` the
tokens the engine served from cache (any tier) and `align` rounding down to the KV page:

| condition                       | reason                                                    |
|---------------------------------|-----------------------------------------------------------|
| `C < align(min(L, n-1, m-1))`   | `evicted`: the shared prefix was cached and is gone       |
| `C >= align(min(n-1, m-1))`     | none: everything reusable was reused                      |
| `L < page_size`                 | `below_page`                                              |
| otherwise                       | by the segment `L` falls in (see `explain`)                |

The last token of either sequence is never served from cache (its logits are computed), hence `n-1`
and `m-1`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

TOKEN_BYTES = array("i").itemsize


def packed(ids: Sequence[int]) -> bytes:
    """Token ids as the store keeps them: compared by `common_prefix` at memcmp speed."""
    return array("i", ids).tobytes()


def unpacked(data: bytes) -> list[int]:
    ids = array("i")
    ids.frombytes(data)
    return ids.tolist()


def common_prefix(a: bytes, b: bytes) -> int:
    """The number of leading tokens two packed sequences share (a binary search over slice equality)."""
    n = min(len(a), len(b)) // TOKEN_BYTES
    if a[: n * TOKEN_BYTES] == b[: n * TOKEN_BYTES]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[: mid * TOKEN_BYTES] == b[: mid * TOKEN_BYTES]:
            lo = mid
        else:
            hi = mid
    return lo


def agree_to(a: bytes, b: bytes, n: int) -> bool:
    """Whether two packed sequences' first `n` tokens are equal, by one slice comparison: False rules
    out their sharing `n` tokens, without `common_prefix`'s search (two sequences both shorter than
    `n` agree only when they are equal)."""
    return a[: n * TOKEN_BYTES] == b[: n * TOKEN_BYTES]


@dataclass(frozen=True)
class Segment:
    """Where a token falls in a chat prompt: `kind` is "tools", "system", "assistant" or "message"."""

    kind: str
    message_index: int | None


# token index -> the segment it falls in (None: a raw prompt)
Locate = Callable[[int], Segment | None]

SEGMENT_REASONS = {"tools": "tools_changed", "system": "system_changed", "message": "messages_changed"}


def miss(kind: str, missed: int, diverged_at: int | None = None, message_index: int | None = None) -> dict[str, Any]:
    return {
        "type": kind,
        "cache_missed_input_tokens": missed,
        "diverged_at_token": diverged_at,
        "message_index": message_index,
    }


def _align(n: int, page_size: int) -> int:
    return max(0, n - n % page_size)


def explain(
    prompt: bytes,
    compared: bytes,
    cached: int,
    page_size: int,
    locate: Locate,
    is_generated: Callable[[int], bool],
) -> dict[str, Any] | None:
    """The reason this prompt was not served further from cache than `cached` tokens, compared with
    `compared`; None when it reused everything the comparison says it could. `is_generated(i)`: the
    assistant message `i` holds text this server generated (a re-rendered reply, not an edit)."""
    n, m = len(prompt) // TOKEN_BYTES, len(compared) // TOKEN_BYTES
    shared = common_prefix(prompt, compared)
    missed = max(0, n - cached)
    if cached < _align(min(shared, n - 1, m - 1), page_size):
        segment = locate(shared)
        return miss("evicted", missed, shared, segment.message_index if segment else None)
    if cached >= _align(min(n - 1, m - 1), page_size):
        return None
    segment = locate(shared)
    index = segment.message_index if segment else None
    if shared < page_size:
        return miss("below_page", missed, shared, index)
    if segment is None:
        return miss("prompt_changed", missed, shared, None)
    if segment.kind == "assistant":
        kind = "history_rerendered" if index is not None and is_generated(index) else "messages_changed"
        return miss(kind, missed, shared, index)
    return miss(SEGMENT_REASONS[segment.kind], missed, shared, index)


def explain_recent(
    prompt: bytes,
    recent: list[bytes],
    cached: int,
    page_size: int,
    locate: Locate,
) -> dict[str, Any] | None:
    """Without an id: against what the tenant sent recently. `evicted` when an earlier sequence
    shared more than was cached, `cold` when none did; None when the prompt was served in full."""
    n = len(prompt) // TOKEN_BYTES
    if cached >= _align(n - 1, page_size):
        return None
    best, best_len = None, -1
    for other in recent:
        # Only a longer shared prefix replaces the best: one slice comparison rules most others out,
        # where a full search costs a dozen (many recent prompts share the same template head).
        if best is not None and not agree_to(prompt, other, best_len + 1):
            continue
        shared = common_prefix(prompt, other)
        if shared > best_len:
            best, best_len = other, shared
    missed = max(0, n - cached)
    if best is None or best_len == 0:
        return miss("cold", missed)
    segment = locate(best_len)
    index = segment.message_index if segment else None
    m = len(best) // TOKEN_BYTES
    kind = "evicted" if cached < _align(min(best_len, n - 1, m - 1), page_size) else "cold"
    return miss(kind, missed, best_len, index)
