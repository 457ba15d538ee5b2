"""Per-template hit statistics, from the `metadata` the SDK sends. No prompt text is kept.

For each (tenant, template) it counts requests, prompt and cached tokens, and how many
static-prefix tokens had to be recomputed: a static prefix served from cache costs nothing,
so a row's recomputed static tokens sum, per request, the static tokens that were not cached.
`/v1/prompt_stats` returns `snapshot()`; the row format and the metadata keys live in `radixgate._wire`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from radixgate._wire import UNTAGGED, RequestTags, TemplateStats

__all__ = ["UNTAGGED", "OTHER", "RequestTags", "PromptStatsRecorder", "TemplateTally", "estimate_static_tokens"]

OTHER = "(other)"
MAX_HASHES_PER_TEMPLATE = 1024


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
class TemplateTally:
    """One (tenant, template)'s running sums; `row()` turns them into a `/v1/prompt_stats` row."""

    template: str
    source: str | None = None
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    max_static_tokens: int = 0
    static_misses: int = 0  # static-prefix tokens not read from cache, summed over requests
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
            self.max_static_tokens = max(self.max_static_tokens, static_tokens)
            self.static_misses += max(0, static_tokens - cached_tokens)
        if tags.static_prefix_hash and tags.static_prefix_hash not in self.hashes:
            if len(self.hashes) < MAX_HASHES_PER_TEMPLATE:
                self.hashes.add(tags.static_prefix_hash)
            else:
                self.num_hashes_over_cap += 1

    def merge(self, other: TemplateTally) -> None:
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.source = self.source or other.source
        self.max_static_tokens = max(self.max_static_tokens, other.max_static_tokens)
        self.static_misses += other.static_misses
        self.hashes |= other.hashes
        self.num_hashes_over_cap += other.num_hashes_over_cap
        self.ttft_sum += other.ttft_sum
        self.ttft_count += other.ttft_count

    @property
    def waste(self) -> int:
        """Recomputed static-prefix tokens when the requests said how long their static part is
        (SDK-tagged); otherwise every recomputed prompt token (untagged or plain-openai apps)."""
        if self.max_static_tokens:
            return self.static_misses
        return self.prompt_tokens - self.cached_tokens

    def row(self) -> TemplateStats:
        return TemplateStats(
            template=self.template,
            source=self.source,
            requests=self.requests,
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            hit_rate=round(self.cached_tokens / self.prompt_tokens, 4) if self.prompt_tokens else 0.0,
            static_prefix_tokens=self.max_static_tokens,
            distinct_static_prefixes=len(self.hashes) + self.num_hashes_over_cap,
            recomputed_static_tokens=self.static_misses,
            recomputed_tokens=self.prompt_tokens - self.cached_tokens,
            mean_ttft_ms=round(1000 * self.ttft_sum / self.ttft_count, 2) if self.ttft_count else None,
        )


class PromptStatsRecorder:
    """Thread-safe aggregation keyed by (tenant, template); each tenant has at most `max_templates`
    rows of its own, its later templates go to its OTHER row (another tenant's never do)."""

    def __init__(self, max_templates: int = 1000) -> None:
        self.max_templates = max_templates
        self._stats: dict[tuple[str, str], TemplateTally] = {}
        self._num_rows: dict[str, int] = {}
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
            if key not in self._stats and self._num_rows.get(tenant, 0) >= self.max_templates:
                key = (tenant, OTHER)
            if key not in self._stats:
                self._stats[key] = TemplateTally(template=key[1])
                self._num_rows[tenant] = self._num_rows.get(tenant, 0) + 1
            self._stats[key].add(tags, prompt_tokens, cached_tokens, static_tokens, ttft)

    def snapshot(self, tenant: str | None = None) -> dict[str, Any]:
        """`{"templates": [...]}` sorted by waste (recomputed static tokens, or every recomputed token
        for templates that did not say how long their static part is), then requests."""
        merged: dict[str, TemplateTally] = {}
        with self._lock:
            for (owner, template), stats in self._stats.items():
                if tenant is not None and owner != tenant:
                    continue
                into = merged.setdefault(template, TemplateTally(template=template))
                into.merge(stats)
        ordered = sorted(merged.values(), key=lambda s: (-s.waste, -s.requests, s.template))
        rows = [s.row().to_json() for s in ordered]
        return {"templates": rows}
