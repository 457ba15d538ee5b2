"""`Prompt`: segments rendered in cache-friendly order, with the identity the gateway tracks.

Typical use defines the static part once and extends it per request::

    SUPPORT = Prompt(system(INSTRUCTIONS), tools(TOOLS), template="support-bot")

    def answer(client, user_id, question, past):
        prompt = SUPPORT.extend(context(f"User id: {user_id}"), user(question), history(past))
        return client.chat(prompt)

Chat rendering: one system message holding the STATIC then SHARED segments, the SESSION
messages, then one user message holding the TURN segments. Within a level, declared order is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._callsite import call_site, warn_at_call_site
from ._exceptions import ShortStaticPrefixWarning, VolatileStaticSegmentWarning
from ._providers import to_anthropic
from ._segments import Message, Segment, Volatility, find_volatile
from ._wire import OPENAI_MIN_CACHE_TOKENS, RequestTags, count_tokens, prefix_hash

__all__ = ["Prompt", "prefix_hash"]

_SEPARATOR = "\n\n"
_PIN_UNITS = {"s": 1, "m": 60, "h": 3600}


def _pin_seconds(ttl: str) -> float:
    """Seconds of a pin such as "5m"; a malformed one counts 0 here (the gateway refuses it, naming it)."""
    number, unit = ttl[:-1], ttl[-1:]
    return int(number) * _PIN_UNITS[unit] if number.isdigit() and unit in _PIN_UNITS else 0


class Prompt:
    """An immutable list of segments that renders static content first.

    `template` names the prompt in the gateway's statistics; it defaults to the ``path:line``
    where the `Prompt` was constructed (``extend`` keeps the parent's). A STATIC segment whose text
    looks volatile (timestamp, UUID, long number) raises `VolatileStaticSegmentWarning`.
    """

    __slots__ = ("_segments", "_template")

    def __init__(self, *segments: Segment, template: str | None = None) -> None:
        self._segments: tuple[Segment, ...] = tuple(segments)
        self._template = template if template is not None else call_site()
        _warn_volatile_static(self._segments)

    def extend(self, *segments: Segment) -> Prompt:
        """A new prompt with `segments` added; same template id."""
        return Prompt(*self._segments, *segments, template=self._template)

    @property
    def template(self) -> str:
        """The template id sent as ``metadata.prompt_template``."""
        return self._template

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The segments in rendering order (stable sort by volatility)."""
        return tuple(sorted(self._segments, key=lambda s: s.volatility))

    def _texts(self, *levels: Volatility) -> list[str]:
        return [s.text for s in self.segments if s.volatility in levels and s.text]

    def static_text(self) -> str:
        """The canonical STATIC part, exactly as it starts the rendered prompt."""
        return _SEPARATOR.join(self._texts(Volatility.STATIC))

    @property
    def static_prefix_hash(self) -> str:
        """Hash of the canonical static segments (``metadata.static_prefix_hash``)."""
        return prefix_hash(self.static_text())

    @property
    def static_prefix_chars(self) -> int:
        """Characters of the static part of the rendered prompt (``metadata.static_prefix_chars``)."""
        return len(self.static_text())

    def static_tokens(self) -> int:
        """cl100k tokens in the static part: what a cache can reuse across every request."""
        return count_tokens(self.static_text())

    def check_cacheable(self, min_tokens: int = OPENAI_MIN_CACHE_TOKENS) -> bool:
        """Warn (`ShortStaticPrefixWarning`) and return False when the static prefix has fewer than
        `min_tokens` tokens, the minimum some providers need before they cache anything."""
        num_tokens = self.static_tokens()
        if num_tokens >= min_tokens:
            return True
        warn_at_call_site(
            f"Prompt {self._template!r}: static prefix is {num_tokens} tokens, below the {min_tokens} "
            "a provider needs before it caches anything, so no request of this template will hit. "
            "Move fixed content (instructions, tool schemas, examples) into static segments.",
            ShortStaticPrefixWarning,
        )
        return False

    @property
    def prompt_cache_key(self) -> str:
        """OpenAI's ``prompt_cache_key``: the static-prefix hash, the same for every request of the
        template whatever follows its static part (see `radixgate.openai_cache_hints`)."""
        return self.static_prefix_hash

    def to_anthropic(self, *, model: str, max_tokens: int, **options: Any) -> dict[str, Any]:
        """An Anthropic Messages API request with ``cache_control`` at the ends of the cacheable
        segments, within the model's limits: ``client.messages.create(**prompt.to_anthropic(...))``.
        See `radixgate._providers.to_anthropic` for `options` (``ttl``, ``warn``, request fields)."""
        return to_anthropic(self, model=model, max_tokens=max_tokens, **options)

    def messages(self) -> list[Message]:
        """OpenAI chat messages: system (STATIC + SHARED), history, then user (TURN)."""
        out: list[Message] = []
        head = _SEPARATOR.join(self._texts(Volatility.STATIC, Volatility.SHARED))
        if head:
            out.append({"role": "system", "content": head})
        for segment in self.segments:
            if segment.volatility == Volatility.SESSION:
                out.extend(dict(m) for m in segment.messages)
        tail = _SEPARATOR.join(self._texts(Volatility.TURN))
        if tail:
            out.append({"role": "user", "content": tail})
        return out

    def prefix(self) -> Prompt:
        """This prompt cut to its STATIC and SHARED segments, same template: what `warm()` sends."""
        cut = object.__new__(Prompt)  # the segments were checked when this prompt was built
        cut._segments = tuple(s for s in self._segments if s.volatility <= Volatility.SHARED)
        cut._template = self._template
        return cut

    def prefix_messages(self) -> list[Message]:
        """Only the system message (STATIC + SHARED): what `warm()` prefills."""
        return self.prefix().messages()

    def text(self) -> str:
        """The prompt as plain text for ``/v1/completions``, in the same order as `messages`."""
        parts: list[str] = []
        for segment in self.segments:
            if segment.messages:
                parts.extend(f"{m['role'].capitalize()}: {m.get('content') or ''}" for m in segment.messages)
            elif segment.text:
                parts.append(segment.text)
        return _SEPARATOR.join(parts)

    def metadata(self, *, source: str | None = None) -> dict[str, str]:
        """The request metadata (`radixgate._wire.RequestTags`); `source` defaults to the caller's ``path:line``."""
        source = source if source is not None else call_site()
        tags = RequestTags(self._template, source, self.static_prefix_hash, self.static_prefix_chars, self.static_pin)
        return tags.to_metadata()

    @property
    def static_pin(self) -> str | None:
        """The longest `pin=` of the STATIC segments (``metadata.static_prefix_ttl``), or None."""
        pins = [s.pin for s in self._segments if s.volatility == Volatility.STATIC and s.pin]
        return max(pins, key=_pin_seconds) if pins else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Prompt) and (self._template, self.segments) == (other._template, other.segments)

    def __hash__(self) -> int:
        return hash(self.text())

    def __repr__(self) -> str:
        names = ", ".join(f"{s.name}:{s.volatility.name.lower()}" for s in self.segments)
        return f"Prompt(template={self._template!r}, segments=[{names}])"


def _warn_volatile_static(segments: Iterable[Segment]) -> None:
    for segment in segments:
        if segment.volatility != Volatility.STATIC:
            continue
        found = find_volatile(segment.text)
        if found:
            kind, text = found
            warn_at_call_site(
                f"Static segment {segment.name!r} contains {kind} ({text!r}). It changes between requests, "
                "so every request misses the prefix cache from that point on. Move it to a TURN segment, "
                "e.g. context(...).",
                VolatileStaticSegmentWarning,
            )
