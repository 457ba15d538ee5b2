"""A prompt site: a prompt built or sent somewhere in the code, as segments in the order the model
reads them. The sinks (`sinks.py`) and the walker find sites; the ordering rules read them."""

from __future__ import annotations

import ast
from typing import NamedTuple

from .shape import Shape


class Segment(NamedTuple):
    """A piece of a prompt with its role: "tools", "system", "user", "assistant" or None."""

    role: str | None
    shape: Shape


class Site(NamedTuple):
    """A prompt built or sent at `node`, as segments in the order the model reads them."""

    node: ast.AST
    segments: list[Segment]
    confidence: str  # "high" for a known sink, "low" for a variable named like a prompt
    provider: str | None  # "openai", "anthropic", "litellm", "http": a hosted API (KV301)
    via: str | None = None  # the chain of the project's own wrappers that sent it, when there is one
