"""Measured drift per template: where a template's requests first differ from its earlier ones.

Every finished request's prompt token ids are compared with the last few prompts of the same
(tenant, template) (`PromptSamples`: at most `MAX_SAMPLES` prompts of `MAX_SAMPLE_TOKENS` tokens for
each of `max_templates` templates, least recently used dropped). The longest common prefix with any
of them is where the request diverged; a prompt that extends or repeats an earlier one (the next turn
of a conversation, a retry) did not diverge. Divergences go into the template's `DriftHistogram`
(`MAX_BINS` token positions, the rest counted), each bin mapped once to the segment it falls in
(tools, system, message i) and carrying a short excerpt of the varying text of its latest request.
"""

from __future__ import annotations

import struct
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from radixgate._wire import Divergence
from radixgate.gateway.diagnostics.compare import agree_to, common_prefix

MAX_SAMPLES = 4  # recent prompts kept per (tenant, template)
MAX_SAMPLE_TOKENS = 4096  # a prompt is kept up to here; later divergences are not seen
MAX_BINS = 8  # divergence positions per template; requests at other positions are only counted
EXCERPT_CHARS = 48
EXCERPT_TOKENS = 16
CONTEXT_TOKENS = 6  # text before the divergence shown in an excerpt, up to the line's start


@dataclass(frozen=True)
class Comparison:
    """A prompt against its template's recent ones: where it diverged (None: it extends or repeats
    the closest one) and that closest prompt's ids (packed int32)."""

    diverged_at: int | None
    earlier: bytes

    def earlier_ids(self, start: int, stop: int) -> list[int]:
        return array("i", self.earlier[start * 4 : stop * 4]).tolist()


class PromptSamples:
    """The recent prompts of each (tenant, template), bounded in templates (LRU), prompts and tokens."""

    def __init__(self, max_templates: int = 256) -> None:
        self.max_templates = max_templates
        self._samples: OrderedDict[tuple[str, str], list[bytes]] = OrderedDict()  # packed int32 ids

    def compare_and_keep(self, key: tuple[str, str], token_ids: Sequence[int]) -> Comparison | None:
        """Compare with the kept prompts (None when there are none yet), then keep this one: in place
        of the prompt it extends, else of the oldest."""
        head = token_ids[:MAX_SAMPLE_TOKENS]
        packed = struct.pack(f"{len(head)}i", *head)  # twice as fast as array("i", list)
        kept = self._samples.get(key)
        if kept is None:
            self._samples[key] = [packed]
            if len(self._samples) > self.max_templates:
                self._samples.popitem(last=False)
            return None
        self._samples.move_to_end(key)
        best, closest = -1, 0
        for i, earlier in enumerate(kept):
            if best > 0 and not agree_to(packed, earlier, best):
                continue  # shares fewer than `best` tokens: one comparison, not a search
            n = common_prefix(packed, earlier)
            if n >= best:  # on a tie the most recent one (kept last)
                best, closest = n, i
        earlier = kept[closest]
        is_extension = best >= min(len(earlier), len(packed)) // 4
        if best >= len(earlier) // 4:
            kept[closest] = packed
        else:
            kept.append(packed)
            if len(kept) > MAX_SAMPLES:
                kept.pop(0)
        return Comparison(None if is_extension else best, earlier)


@dataclass(frozen=True)
class Segment:
    """A part of a rendered chat prompt, in characters: `[start, end)`."""

    name: str  # "tools", "system", "message 2 (user)", "generation prompt"
    message_index: int | None
    start: int
    end: int


def chat_segments(text: str, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None) -> list[Segment]:
    """Where each message and the tool list sit in the rendered `text`. A message owns the template
    text before its content (its role header); a message the template transformed beyond finding
    is folded into the next. Tools are the span from the first tool's name to the last one's end."""
    segments: list[Segment] = []
    cursor = 0
    for i, message in enumerate(messages):
        content = message.get("content") or ""
        pos = text.find(content, cursor) if content else -1
        if pos < 0:
            continue
        role = str(message.get("role"))
        name = "system" if role in ("system", "developer") else f"message {i} ({role})"
        segments.append(Segment(name, i, cursor, pos + len(content)))
        cursor = pos + len(content)
    segments.append(Segment("generation prompt", None, cursor, len(text) + 1))
    spans = []
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        tool_name = fn.get("name") if isinstance(fn, dict) else None
        pos = text.find(f'"{tool_name}"') if isinstance(tool_name, str) else -1
        if pos >= 0:
            spans.append((pos, pos + len(str(tool))))
    if spans:
        # the tool's serialisation starts before its name ({"type": "function", "function": {"name": ...)
        start = max(0, min(s for s, _ in spans) - 48)
        segments.insert(0, Segment("tools", None, start, min(len(text), max(e for _, e in spans))))
    return segments


def segment_at(segments: Sequence[Segment], char: int) -> Segment | None:
    for segment in segments:  # tools first: they sit inside another segment's span
        if segment.start <= char < segment.end:
            return segment
    return None


@dataclass
class PromptView:
    """How to read one request's prompt for the histogram: its ids, its chat structure when it came
    from messages (else it is one "prompt" segment), and the worker's detokenizer."""

    token_ids: Sequence[int]
    detokenize: Callable[[Sequence[int]], str]
    text: str | None = None
    messages: Sequence[dict[str, Any]] | None = None
    tools: Sequence[Any] | None = None

    def segment(self, token: int) -> tuple[str, int | None]:
        if self.messages is None or self.text is None:
            return "prompt", None
        char = len(self.detokenize(self.token_ids[:token]))
        found = segment_at(chat_segments(self.text, self.messages, self.tools), char)
        return (found.name, found.message_index) if found else ("prompt", None)

    def excerpts(self, token: int, comparison: Comparison) -> tuple[str, str]:
        """This prompt's text from a little before `token`, and the earlier prompt's at the same place."""
        context = self.detokenize(self.token_ids[max(0, token - CONTEXT_TOKENS) : token]).rpartition("\n")[2]
        now = self.detokenize(self.token_ids[token : token + EXCERPT_TOKENS])
        before = self.detokenize(comparison.earlier_ids(token, token + EXCERPT_TOKENS))
        return (context + now)[:EXCERPT_CHARS], (context + before)[:EXCERPT_CHARS]


@dataclass
class DriftHistogram:
    """One (tenant, template)'s divergence positions; `rows()` is the `divergence` of its stats row."""

    compared: int = 0
    divergent: int = 0
    over_cap: int = 0
    bins: dict[int, Divergence] = field(default_factory=dict)

    def add(self, comparison: Comparison, view: PromptView, keep_excerpts: bool) -> None:
        self.compared += 1
        token = comparison.diverged_at
        if token is None:
            return
        self.divergent += 1
        found = self.bins.get(token)
        if found is None:
            if len(self.bins) >= MAX_BINS:
                self.over_cap += 1
                return
            segment, index = view.segment(token)
            found = self.bins[token] = Divergence(token, 0, segment, index)
        found.requests += 1
        if keep_excerpts:
            found.excerpt, found.previous = view.excerpts(token, comparison)

    def merge(self, other: DriftHistogram, with_excerpts: bool = True) -> None:
        self.compared += other.compared
        self.divergent += other.divergent
        self.over_cap += other.over_cap
        for token, theirs in other.bins.items():
            mine = self.bins.get(token)
            if mine is None:
                mine = self.bins[token] = Divergence(token, 0, theirs.segment, theirs.message_index)
            mine.requests += theirs.requests
            if with_excerpts and theirs.excerpt is not None:
                mine.excerpt, mine.previous = theirs.excerpt, theirs.previous

    def rows(self) -> list[Divergence]:
        ordered = sorted(self.bins.values(), key=lambda d: (-d.requests, d.token))
        return [Divergence(d.token, d.requests, d.segment, d.message_index, d.excerpt, d.previous) for d in ordered]


class DriftTracker:
    """The recorder's drift side: compares each prompt with its template's recent ones and files the
    divergence in that template's histogram. `keep_excerpts=False` (`--disable-prompt-excerpts`)
    keeps positions and segments only, never text."""

    def __init__(self, max_templates: int = 256, keep_excerpts: bool = True) -> None:
        self.samples = PromptSamples(max_templates)
        self.keep_excerpts = keep_excerpts

    def observe(self, key: tuple[str, str], histogram: DriftHistogram, view: PromptView) -> None:
        """Not thread-safe: the recorder calls it under its lock."""
        comparison = self.samples.compare_and_keep(key, view.token_ids)
        if comparison is not None:
            histogram.add(comparison, view, self.keep_excerpts)
