"""Typed prompt segments and their canonical text.

Each segment carries a volatility level. `Prompt` renders less volatile segments first, whatever
order the code declared them in, so every request of a template starts with the same tokens:

    level     changes                      typical content                      helper
    STATIC    never, within a template     instructions, tool schemas, examples system(), tools(), examples()
    SHARED    across groups of requests    RAG documents                        document()
    SESSION   within a conversation        history                              history()
    TURN      every request                user id, current time, the question  context(), user()

Text is canonicalized (Unicode NFC, one kind of space, no trailing blanks, at most one empty line
in a row) and tool schemas are serialized with sorted keys in a stable order, so two processes
that build "the same" prompt produce the same bytes.
"""

from __future__ import annotations

import enum
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "Volatility",
    "Segment",
    "Message",
    "system",
    "tools",
    "examples",
    "document",
    "history",
    "context",
    "user",
    "canonical_text",
    "canonical_json",
    "find_volatile",
]

Role = Literal["system", "user", "assistant", "tool"]
Message = dict[str, Any]


class Volatility(enum.IntEnum):
    """How often a segment's content changes; lower values render first."""

    STATIC = 0
    SHARED = 1
    SESSION = 2
    TURN = 3


@dataclass(frozen=True)
class Segment:
    """One named piece of a prompt.

    `text` is canonical already (build segments with the helpers below). History segments carry
    `messages` instead of text.
    """

    name: str
    volatility: Volatility
    text: str = ""
    messages: tuple[Message, ...] = ()
    pin: str | None = None  # STATIC only: keep the prompt's static part cached this long ("5m", "1h")


_HORIZONTAL_SPACE = re.compile(r"[^\S\n]")
_INNER_SPACE_RUN = re.compile(r"(?<=\S) {2,}(?=\S)")
_BLANK_LINES = re.compile(r"\n{3,}")


def canonical_text(text: str) -> str:
    """`text` in canonical form: NFC, ``\\n`` line ends, ASCII spaces, single inner spaces (leading
    indentation kept), no trailing spaces, at most one empty line in a row, stripped ends."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\t", "    ")
    text = _HORIZONTAL_SPACE.sub(" ", text)
    lines = [_INNER_SPACE_RUN.sub(" ", line).rstrip() for line in text.split("\n")]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def canonical_json(value: Any) -> str:
    """`value` as JSON with sorted keys, fixed separators and unescaped Unicode."""
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False)


_VOLATILE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("an ISO timestamp", re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")),
    ("a UUID", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")),
    ("a long digit run", re.compile(r"(?<![\d.])\d{8,}(?![\d.])")),
)


def find_volatile(text: str) -> tuple[str, str] | None:
    """The first volatile-looking match in `text` as ``(kind, matched text)``, or None."""
    for kind, pattern in _VOLATILE_PATTERNS:
        match = pattern.search(text)
        if match:
            return kind, match.group(0)
    return None


def system(text: str, *, name: str = "system", pin: str | None = None) -> Segment:
    """Static instructions: identical in every request of the template. `pin` ("5m", "1h", ...)
    asks radixgate to hold the prompt's static part in its cache that long, each hit restarting it."""
    return Segment(name, Volatility.STATIC, canonical_text(text), pin=pin)


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    if isinstance(function, Mapping) and "name" in function:
        return str(function["name"])
    return str(tool.get("name", canonical_json(tool)))


def tools(schemas: Iterable[Mapping[str, Any]], *, name: str = "tools", pin: str | None = None) -> Segment:
    """Tool (function) schemas, one canonical JSON line each, ordered by tool name; `pin` as `system`'s."""
    ordered = sorted((dict(s) for s in schemas), key=_tool_name)
    lines = "\n".join(canonical_json(s) for s in ordered)
    return Segment(name, Volatility.STATIC, f"# Tools\n{lines}" if lines else "", pin=pin)


def examples(pairs: Iterable[tuple[str, str]], *, name: str = "examples") -> Segment:
    """Few-shot ``(input, output)`` examples in the declared order (never shuffle them per request)."""
    blocks = [f"Input: {canonical_text(q)}\nOutput: {canonical_text(a)}" for q, a in pairs]
    return Segment(name, Volatility.STATIC, "# Examples\n\n" + "\n\n".join(blocks) if blocks else "")


def document(text: str, *, name: str = "document", title: str | None = None) -> Segment:
    """A document reused across requests (RAG context): after static content, before the question."""
    body = canonical_text(text)
    return Segment(name, Volatility.SHARED, f"# {canonical_text(title)}\n{body}" if title else body)


def history(messages: Sequence[Message], *, name: str = "history") -> Segment:
    """Earlier turns of the conversation, as OpenAI chat messages, in order."""
    canonical = tuple(
        {**m, "content": canonical_text(m["content"])} if isinstance(m.get("content"), str) else dict(m)
        for m in messages
    )
    return Segment(name, Volatility.SESSION, messages=canonical)


def context(text: str, *, name: str = "context") -> Segment:
    """Per-request facts such as the user id or the current time: rendered last, next to the question."""
    return Segment(name, Volatility.TURN, canonical_text(text))


def user(text: str, *, name: str = "question") -> Segment:
    """The user's message for this request."""
    return Segment(name, Volatility.TURN, canonical_text(text))
