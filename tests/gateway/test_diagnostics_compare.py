"""`explain_recent` against a plain reference: the first recent sequence sharing the longest prefix
decides the reason, whatever shortcut the comparison takes."""

from __future__ import annotations

import random
from typing import Any

from radixgate.gateway.diagnostics.compare import _align, explain_recent, miss, packed
from radixgate.gateway.diagnostics.segments import raw_locator


def _shared(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _reference(prompt: list[int], recent: list[list[int]], cached: int, page_size: int) -> dict[str, Any] | None:
    n = len(prompt)
    if cached >= _align(n - 1, page_size):
        return None
    best, best_len = None, -1
    for other in recent:
        if _shared(prompt, other) > best_len:
            best, best_len = other, _shared(prompt, other)
    if best is None or best_len == 0:
        return miss("cold", n - cached)
    kind = "evicted" if cached < _align(min(best_len, n - 1, len(best) - 1), page_size) else "cold"
    return miss(kind, n - cached, best_len, None)


def test_explain_recent_matches_a_plain_loop() -> None:
    rng = random.Random(11)
    for _ in range(300):
        prompt = [rng.randrange(4) for _ in range(rng.randrange(1, 60))]
        recent = []
        for _ in range(rng.randrange(0, 12)):
            head = prompt[: rng.randrange(len(prompt) + 1)]
            recent.append(head + [rng.randrange(4) for _ in range(rng.randrange(0, 20))])
        cached = rng.randrange(len(prompt) + 1)
        page_size = rng.choice((1, 4, 16))
        found = explain_recent(packed(prompt), [packed(r) for r in recent], cached, page_size, raw_locator)
        assert found == _reference(prompt, recent, cached, page_size), (prompt, recent, cached, page_size)
