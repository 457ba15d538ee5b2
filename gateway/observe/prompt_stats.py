"""Per-template hit statistics, from the `metadata` the SDK sends (or `prompt_cache_key`).

For each (tenant, template) it counts requests, prompt and cached tokens, and how many
static-prefix tokens had to be recomputed: a static prefix served from cache costs nothing,
so a row's recomputed static tokens sum, per request, the static tokens that were not cached.
It also measures drift (`drift.py`): where the template's requests first differ from its earlier
ones, with short excerpts of the varying text, the only prompt text kept (a tenant sees its own,
the admin all; none with `--disable-prompt-excerpts`).
`/v1/prompt_stats` returns `snapshot()`; the row format and the metadata keys live in `radixgate._wire`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

from radixgate._wire import UNTAGGED, RequestTags, TemplateStats

from .drift import DriftHistogram, DriftTracker, PromptView

__all__ = ["UNTAGGED", "OTHER", "RequestTags", "PromptStatsRecorder", "TemplateTally", "estimate_static_tokens"]

OTHER = "(other)"
MAX_HASHES_PER_TEMPLATE = 1024
CACHE_KEY_TEMPLATE = "prompt_cache_key:"  # an untagged request's template, named by its prompt_cache_key


def template_of(tags: RequestTags, prompt_cache_key: str | None) -> RequestTags:
    """The template a request counts under: the SDK's tag, else its `prompt_cache_key`, else untagged."""
    if tags.template != UNTAGGED or not prompt_cache_key:
        return tags
    return replace(tags, template=CACHE_KEY_TEMPLATE + prompt_cache_key[:160])


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
    drift: DriftHistogram = field(default_factory=DriftHistogram)

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
        self.drift.merge(other.drift)

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
            compared_requests=self.drift.compared,
            divergent_requests=self.drift.divergent,
            divergence=self.drift.rows(),
            other_divergences=self.drift.over_cap,
        )


class PromptStatsRecorder:
    """Thread-safe aggregation keyed by (tenant, template); each tenant has at most `max_templates`
    rows of its own, its later templates go to its OTHER row (another tenant's never do). Drift is
    measured for the `max_drift_templates` most recently used (tenant, template) pairs, never for OTHER."""

    def __init__(self, max_templates: int = 1000, max_drift_templates: int = 256, keep_excerpts: bool = True) -> None:
        self.max_templates = max_templates
        self.drift = DriftTracker(max_drift_templates, keep_excerpts)
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
        prompt: PromptView | None = None,
    ) -> None:
        """Add one finished request; with `prompt` (its ids and how to read them), measure its drift."""
        with self._lock:
            key = (tenant, tags.template)
            if key not in self._stats and self._num_rows.get(tenant, 0) >= self.max_templates:
                key = (tenant, OTHER)
            if key not in self._stats:
                self._stats[key] = TemplateTally(template=key[1])
                self._num_rows[tenant] = self._num_rows.get(tenant, 0) + 1
            tally = self._stats[key]
            tally.add(tags, prompt_tokens, cached_tokens, static_tokens, ttft)
            if prompt is not None and key[1] != OTHER:
                self.drift.observe(key, tally.drift, prompt)

    def requests_of(self, tenant: str, template: str) -> int:
        """Finished requests of one tenant's template so far (0 for one never seen, and for OTHER's)."""
        with self._lock:
            tally = self._stats.get((tenant, template))
        return tally.requests if tally is not None and template != OTHER else 0

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
