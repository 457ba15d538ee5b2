"""Statistics feedback: the gateway's `/v1/prompt_stats`, matched to findings by call site.

A template's `source` is `path:line` of the call that sent it. A finding matches when its file
ends with that path (or the path ends with the file) and the line lies within the finding's
enclosing prompt call. Matched findings carry the measured hit rate and the prompt tokens
recomputed, and are listed first, most waste first. A template that wastes tokens with no
static finding at its source becomes KV901. The measured drift (`measured.py`) adds KV902 and
confirms or demotes the static findings at its call site. Only `--stats` reads the network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from radixgate._wire import PROMPT_STATS_PATH, TemplateStats

from . import measured as drift
from .rules import MeasuredWaste
from .violation import Measured, Violation


class StatsError(Exception):
    """The statistics could not be read; the message says from where and why."""


class SourcedTemplate(NamedTuple):
    """A `/v1/prompt_stats` row whose `source` names a call site (`path:line`)."""

    row: TemplateStats
    path: str
    line: int

    @property
    def recomputed(self) -> int:
        return max(0, self.row.prompt_tokens - self.row.cached_tokens)

    @property
    def ideal_hit_rate(self) -> float:
        """The hit rate the static prefix allows: every request after the first per distinct
        prefix reads the prefix from cache."""
        row = self.row
        if row.prompt_tokens <= 0:
            return 0.0
        misses = max(1, row.distinct_static_prefixes)  # each distinct prefix is computed once
        reusable = row.static_prefix_tokens * max(0, row.requests - misses)
        return min(1.0, reusable / row.prompt_tokens)

    def measured(self) -> Measured:
        return Measured(self.row.template, self.row.requests, self.row.hit_rate, self.recomputed)


def stats_url(where: str) -> str:
    """`http://host:port`, `.../v1` or the full endpoint -> the `/v1/prompt_stats` URL."""
    url = where.rstrip("/")
    if url.endswith(PROMPT_STATS_PATH.removeprefix("/v1")):
        return url
    return url.removesuffix("/v1") + PROMPT_STATS_PATH


def load(where: str, api_key: str | None = None, timeout: float = 10.0) -> list[SourcedTemplate]:
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


def parse(data: object, where: str = "statistics") -> list[SourcedTemplate]:
    if not isinstance(data, dict) or not isinstance(data.get("templates"), list):
        raise StatsError(f"{where}: expected an object with a `templates` list")
    out = []
    for item in data["templates"]:
        try:
            row = TemplateStats.from_json(item)
        except (KeyError, TypeError, ValueError) as exc:
            raise StatsError(f"{where}: malformed template entry {item!r}: {exc}") from None
        path, _, line = (row.source or "").rpartition(":")
        if not path or not line.isdigit():
            continue  # untagged traffic has no call site
        out.append(SourcedTemplate(row, path.replace("\\", "/"), int(line)))
    return out


def same_file(filename: str, path: str) -> bool:
    """Whether a linted `filename` and a stats `path` name the same file (suffix match on whole
    path components, either way round)."""
    a = [p for p in Path(filename).as_posix().split("/") if p not in ("", ".")]
    b = [p for p in path.split("/") if p not in ("", ".")]
    n = min(len(a), len(b))
    return n > 0 and a[-n:] == b[-n:]


def _matches(v: Violation, t: SourcedTemplate) -> bool:
    if not same_file(v.filename, t.path):
        return False
    start, end = v.span or (v.row, v.end_row)
    return start <= t.line <= end or v.row <= t.line <= v.end_row


def apply(
    violations: list[Violation],
    templates: list[SourcedTemplate],
    filenames: list[str],
    enabled: bool = True,
    drift_enabled: bool = True,
) -> list[Violation]:
    """Attach measurements (with the drift's verdict), add KV901 (when `enabled`) and KV902 (when
    `drift_enabled`) findings, and order by measured waste."""
    matched: set[int] = set()
    out: list[Violation] = []
    for v in violations:
        hits = [i for i, t in enumerate(templates) if _matches(v, t)]
        matched.update(hits)
        if hits:
            worst = max((templates[i] for i in hits), key=lambda t: t.recomputed)
            v = drift.judge(v, worst.row, worst.measured())
        out.append(v)
    for i, t in enumerate(templates if drift_enabled else ()):
        filename = next((f for f in filenames if same_file(f, t.path)), None)
        found = drift.findings([drift.Site(t.row, filename, t.line, t.measured())]) if filename else []
        out.extend(found)
        if found:
            matched.add(i)  # KV902 names the cause of the waste KV901 counts: no KV901 beside it
    if enabled:
        out.extend(_unexplained(templates, matched, filenames))
    measured = sorted((v for v in out if v.measured), key=lambda v: -v.measured.recomputed_tokens if v.measured else 0)
    return measured + [v for v in out if not v.measured]


def _unexplained(templates: list[SourcedTemplate], matched: set[int], filenames: list[str]) -> list[Violation]:
    rule = MeasuredWaste()
    out = []
    for i, t in enumerate(templates):
        if i in matched or t.row.requests < 2:
            continue
        ideal = t.ideal_hit_rate
        if ideal - t.row.hit_rate < 0.2 and t.row.hit_rate >= ideal / 2:
            continue
        filename = next((f for f in filenames if same_file(f, t.path)), None)
        if filename is None:
            continue
        distinct = t.row.distinct_static_prefixes
        message = (
            rule.format(hit_rate=t.row.hit_rate, requests=t.row.requests)
            + f" against an ideal {ideal:.0%} for its {t.row.static_prefix_tokens:,}-token "
            f"static prefix: {t.recomputed:,} prompt tokens recomputed"
            + (f" ({distinct} distinct static prefixes)" if distinct > 1 else "")
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
