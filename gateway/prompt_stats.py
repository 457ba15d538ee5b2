"""Per-template hit statistics, from the `metadata` the SDK sends. No prompt text is kept.

For each (tenant, template) it counts requests, prompt and cached tokens, and how many
static-prefix tokens had to be recomputed: a static prefix served from cache costs nothing,
so `recomputed_static_tokens` sums, per request, the static tokens that were not cached.
`/v1/prompt_stats` returns `snapshot()`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

UNTAGGED = "(untagged)"
OTHER = "(other)"
MAX_HASHES_PER_TEMPLATE = 1024


@dataclass(frozen=True)
class RequestTags:
    """What the SDK tells us about a request; all optional."""

    template: str = UNTAGGED
    source: str | None = None
    static_prefix_hash: str | None = None
    static_prefix_chars: int | None = None

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str] | None) -> RequestTags:
        metadata = metadata or {}
        chars = metadata.get("static_prefix_chars")
        try:
            num_chars = int(chars) if chars is not None else None
        except ValueError:
            num_chars = None
        return cls(
            template=(metadata.get("prompt_template") or UNTAGGED)[:200],
            source=metadata.get("prompt_source", "")[:300] or None,
            static_prefix_hash=metadata.get("static_prefix_hash", "")[:128] or None,
            static_prefix_chars=num_chars if num_chars is not None and num_chars >= 0 else None,
        )


def estimate_static_tokens(
    static_chars: int | None, prompt_chars: int, prompt_tokens: int, measured: int | None = None
) -> int:
    """Static-prefix tokens: measured by tokenizing the prefix when the caller could, else scaled
    from characters by this prompt's own characters-per-token ratio. Never above the prompt."""
    if static_chars is None:
        return 0
    if measured is not None:
        return min(measured, prompt_tokens)
    if prompt_chars <= 0:
        return 0
    return min(prompt_tokens, round(prompt_tokens * min(static_chars, prompt_chars) / prompt_chars))


@dataclass
class TemplateStats:
    template: str
    source: str | None = None
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    static_prefix_tokens: int = 0
    recomputed_static_tokens: int = 0
    hashes: set[str] = field(default_factory=set)
    num_hashes_over_cap: int = 0
    ttft_sum: float = 0.0
    ttft_count: int = 0

    def add(
        self, tags: RequestTags, prompt_tokens: int, cached_tokens: int, static_tokens: int, ttft: float | None = None
    ) -> None:
        self.requests += 1
        if ttft is not None:
            self.ttft_sum += ttft
            self.ttft_count += 1
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens
        if tags.source:
            self.source = tags.source
        if static_tokens:
            self.static_prefix_tokens = max(self.static_prefix_tokens, static_tokens)
            self.recomputed_static_tokens += max(0, static_tokens - cached_tokens)
        if tags.static_prefix_hash and tags.static_prefix_hash not in self.hashes:
            if len(self.hashes) < MAX_HASHES_PER_TEMPLATE:
                self.hashes.add(tags.static_prefix_hash)
            else:
                self.num_hashes_over_cap += 1

    def merge(self, other: TemplateStats) -> None:
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.source = self.source or other.source
        self.static_prefix_tokens = max(self.static_prefix_tokens, other.static_prefix_tokens)
        self.recomputed_static_tokens += other.recomputed_static_tokens
        self.hashes |= other.hashes
        self.num_hashes_over_cap += other.num_hashes_over_cap
        self.ttft_sum += other.ttft_sum
        self.ttft_count += other.ttft_count

    @property
    def waste(self) -> int:
        """Recomputed static-prefix tokens when the requests said how long their static part is
        (SDK-tagged); otherwise every recomputed prompt token (untagged or plain-openai apps)."""
        if self.static_prefix_tokens:
            return self.recomputed_static_tokens
        return self.prompt_tokens - self.cached_tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "template": self.template,
            "source": self.source,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "hit_rate": round(self.cached_tokens / self.prompt_tokens, 4) if self.prompt_tokens else 0.0,
            "static_prefix_tokens": self.static_prefix_tokens,
            "distinct_static_prefixes": len(self.hashes) + self.num_hashes_over_cap,
            "recomputed_static_tokens": self.recomputed_static_tokens,
            "recomputed_tokens": self.prompt_tokens - self.cached_tokens,
            "mean_ttft_ms": round(1000 * self.ttft_sum / self.ttft_count, 2) if self.ttft_count else None,
        }


class PromptStats:
    """Thread-safe aggregation keyed by (tenant, template); at most `max_templates` keys, the rest go to OTHER."""

    def __init__(self, max_templates: int = 1000) -> None:
        self.max_templates = max_templates
        self._stats: dict[tuple[str, str], TemplateStats] = {}
        self._lock = threading.Lock()

    def record(
        self,
        tenant: str,
        tags: RequestTags,
        prompt_tokens: int,
        cached_tokens: int,
        static_tokens: int,
        ttft: float | None = None,
    ) -> None:
        with self._lock:
            key = (tenant, tags.template)
            if key not in self._stats and len(self._stats) >= self.max_templates:
                key = (tenant, OTHER)
            if key not in self._stats:
                self._stats[key] = TemplateStats(template=key[1])
            self._stats[key].add(tags, prompt_tokens, cached_tokens, static_tokens, ttft)

    def snapshot(self, tenant: str | None = None) -> dict[str, Any]:
        """`{"templates": [...]}` sorted by waste (recomputed static tokens, or every recomputed token
        for templates that did not say how long their static part is), then requests."""
        merged: dict[str, TemplateStats] = {}
        with self._lock:
            for (owner, template), stats in self._stats.items():
                if tenant is not None and owner != tenant:
                    continue
                into = merged.setdefault(template, TemplateStats(template=template))
                into.merge(stats)
        ordered = sorted(merged.values(), key=lambda s: (-s.waste, -s.requests, s.template))
        rows = [s.to_json() for s in ordered]
        return {"templates": rows}
