"""Statistics feedback: the gateway's `/v1/prompt_stats`, matched to findings by call site.

A template's `source` is `path:line` of the call that sent it. A finding matches when its file
ends with that path (or the path ends with the file) and the line lies within the finding's
enclosing prompt call. Matched findings carry the measured hit rate and the prompt tokens
recomputed, and are listed first, most waste first. A template that wastes tokens with no
static finding at its source becomes KV901. Only `--stats` reads the network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from .rules import MeasuredWaste
from .violation import Measured, Violation


class StatsError(Exception):
    """The statistics could not be read; the message says from where and why."""


class TemplateStats(NamedTuple):
    template: str
    path: str
    line: int
    requests: int
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float
    static_prefix_tokens: int
    distinct_static_prefixes: int

    @property
    def recomputed(self) -> int:
        return max(0, self.prompt_tokens - self.cached_tokens)

    @property
    def ideal_hit_rate(self) -> float:
        """The hit rate the static prefix allows: every request after the first per distinct
        prefix reads the prefix from cache."""
        if self.prompt_tokens <= 0:
            return 0.0
        misses = max(1, self.distinct_static_prefixes)  # each distinct prefix is computed once
        reusable = self.static_prefix_tokens * max(0, self.requests - misses)
        return min(1.0, reusable / self.prompt_tokens)

    def measured(self) -> Measured:
        return Measured(self.template, self.requests, self.hit_rate, self.recomputed)


def stats_url(where: str) -> str:
    """`http://host:port`, `.../v1` or the full endpoint -> the `/v1/prompt_stats` URL."""
    url = where.rstrip("/")
    if url.endswith("/prompt_stats"):
        return url
    return url + ("/prompt_stats" if url.endswith("/v1") else "/v1/prompt_stats")


def load(where: str, api_key: str | None = None, timeout: float = 10.0) -> list[TemplateStats]:
    """Templates from a URL (the gateway, or its `/v1/prompt_stats`) or a saved JSON file.
    With `api_key` (a gateway with tenants), the statistics of that key's tenant."""
    if where.startswith(("http://", "https://")):
        import httpx

        url = stats_url(where)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            response = httpx.get(url, timeout=timeout, headers=headers)
            response.raise_for_status()
            data = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise StatsError(f"cannot read statistics from {url}: {exc}") from None
    else:
        try:
            data = json.loads(Path(where).read_text())
        except (OSError, ValueError) as exc:
            raise StatsError(f"cannot read statistics from {where}: {exc}") from None
    return parse(data, where)


def parse(data: object, where: str = "statistics") -> list[TemplateStats]:
    if not isinstance(data, dict) or not isinstance(data.get("templates"), list):
        raise StatsError(f"{where}: expected an object with a `templates` list")
    out = []
    for item in data["templates"]:
        try:
            source = str(item.get("source") or "")
            path, _, line = source.rpartition(":")
            if not path or not line.isdigit():
                continue  # untagged traffic has no call site
            out.append(
                TemplateStats(
                    str(item.get("template", "")),
                    path.replace("\\", "/"),
                    int(line),
                    int(item["requests"]),
                    int(item["prompt_tokens"]),
                    int(item["cached_tokens"]),
                    float(item["hit_rate"]),
                    int(item.get("static_prefix_tokens", 0)),
                    int(item.get("distinct_static_prefixes", 1)),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StatsError(f"{where}: malformed template entry {item!r}: {exc}") from None
    return out


def same_file(filename: str, path: str) -> bool:
    """Whether a linted `filename` and a stats `path` name the same file (suffix match on whole
    path components, either way round)."""
    a = [p for p in Path(filename).as_posix().split("/") if p not in ("", ".")]
    b = [p for p in path.split("/") if p not in ("", ".")]
    n = min(len(a), len(b))
    return n > 0 and a[-n:] == b[-n:]


def _matches(v: Violation, t: TemplateStats) -> bool:
    if not same_file(v.filename, t.path):
        return False
    start, end = v.span or (v.row, v.end_row)
    return start <= t.line <= end or v.row <= t.line <= v.end_row


def apply(
    violations: list[Violation], templates: list[TemplateStats], filenames: list[str], enabled: bool = True
) -> list[Violation]:
    """Attach measurements, add KV901 findings (when `enabled`), and order by measured waste."""
    matched: set[int] = set()
    out: list[Violation] = []
    for v in violations:
        hits = [i for i, t in enumerate(templates) if _matches(v, t)]
        matched.update(hits)
        if hits:
            worst = max((templates[i] for i in hits), key=lambda t: t.recomputed)
            v = v._replace(measured=worst.measured())
        out.append(v)
    if enabled:
        out.extend(_unexplained(templates, matched, filenames))
    measured = sorted((v for v in out if v.measured), key=lambda v: -v.measured.recomputed_tokens)
    return measured + [v for v in out if not v.measured]


def _unexplained(templates: list[TemplateStats], matched: set[int], filenames: list[str]) -> list[Violation]:
    rule = MeasuredWaste()
    out = []
    for i, t in enumerate(templates):
        if i in matched or t.requests < 2:
            continue
        ideal = t.ideal_hit_rate
        if ideal - t.hit_rate < 0.2 and t.hit_rate >= ideal / 2:
            continue
        filename = next((f for f in filenames if same_file(f, t.path)), None)
        if filename is None:
            continue
        message = (
            rule.format(hit_rate=t.hit_rate, requests=t.requests)
            + f" against an ideal {ideal:.0%} for its {t.static_prefix_tokens:,}-token "
            f"static prefix: {t.recomputed:,} prompt tokens recomputed"
            + (f" ({t.distinct_static_prefixes} distinct static prefixes)" if t.distinct_static_prefixes > 1 else "")
        )
        out.append(
            Violation(
                rule.code,
                message,
                filename,
                t.line,
                1,
                t.line,
                1,
                rule.severity(None),
                None,
                (t.line, t.line),
                t.measured(),
            )
        )
    return out
