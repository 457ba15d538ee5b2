"""Which part of a chat prompt a token falls in: the tools block, the system message, or message i.

Computed only when a miss needs explaining: message i starts where the rendering of the messages
before it stops agreeing with the whole prompt's, and the tools block is where the rendering without
tools departs from the one with them. A token index becomes a character offset by decoding the
prompt up to it."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from .compare import Locate, Segment

SYSTEM_ROLES = ("system", "developer")


def _shared_chars(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def _shared_suffix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a[::-1], b[::-1]]))


def chat_locator(
    render: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str],
    detokenize: Callable[[Sequence[int]], str],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    prompt_ids: Sequence[int],
) -> Locate:
    """`render(messages, tools)` is the worker's chat rendering (with the generation prompt)."""
    spans: dict[str, Any] = {}

    def compute() -> None:
        text = render(messages, tools)
        starts = []
        for i in range(len(messages)):
            try:
                before = render(messages[:i], tools) if i else ""
            except Exception:  # a template that needs a first message, say
                before = ""
            starts.append(min(_shared_chars(before, text), len(text)))
        tools_span = (0, 0)
        if tools:
            try:
                plain = render(messages, None)
                tools_span = (_shared_chars(plain, text), len(text) - _shared_suffix(plain, text))
            except Exception:
                pass
        spans.update(starts=starts, tools=tools_span)

    def locate(token: int) -> Segment | None:
        if not spans:
            compute()
        offset = len(detokenize(prompt_ids[:token]))
        lo, hi = spans["tools"]
        if lo <= offset < hi:
            return Segment("tools", None)
        index = None
        for i, start in enumerate(spans["starts"]):
            if start <= offset:
                index = i
        if index is None:
            return Segment("message", 0) if messages else None
        role = messages[index].get("role")
        kind = "system" if role in SYSTEM_ROLES else "assistant" if role == "assistant" else "message"
        return Segment(kind, index)

    return locate


def raw_locator(_: int) -> Segment | None:
    """A raw prompt (`/v1/completions`, `/generate`) has no segments."""
    return None
