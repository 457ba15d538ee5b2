"""The gateway's measured drift (`--stats`): KV902 at a template's call site, and what it says of the
static findings at the same site.

How the measurement and the static rules combine:

- A template's drift speaks once `MIN_COMPARED` of its requests were compared with earlier ones.
- A divergence *breaks* the cache when it is in the tools or the system message, or before the
  static prefix the SDK declared, and holds at least `MIN_SHARE` of the compared requests (and two).
  A divergence in a later message is the question or the history: expected, never reported.
- A template with a breaking divergence is one KV902 finding at its source line (the most frequent
  breaking divergence, its excerpt when the gateway keeps excerpts). It replaces KV901 there: KV902
  names the cause of the waste KV901 counts.
- A static finding at the same call site is *confirmed* by a breaking divergence (kept, and its
  message says so), and *demoted* to `info` when the template's drift speaks and shows none (the
  gateway saw enough requests and none diverged early). A severity set in configuration still wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from radixgate._wire import Divergence, TemplateStats

from .rules import MeasuredDrift
from .violation import Measured, Violation


class Site(NamedTuple):
    """A template row at its call site in a linted file, with the numbers a finding carries."""

    row: TemplateStats
    filename: str
    line: int
    measured: Measured


MIN_COMPARED = 5
MIN_SHARE = 0.2
CONFIRMED = "confirmed by the measured drift"
DEMOTED = "demoted: the measured drift shows no early divergence"


def breaking(row: TemplateStats) -> list[Divergence]:
    """The row's divergences in parts of the prompt that should not change, most requests first."""
    if row.compared_requests < MIN_COMPARED:
        return []
    floor = max(2, MIN_SHARE * row.compared_requests)
    static_end = row.static_prefix_tokens
    return [
        d
        for d in row.divergence
        if d.requests >= floor and (d.segment in ("tools", "system") or (static_end and d.token < static_end))
    ]


def where(d: Divergence) -> str:
    if d.segment == "system":
        return "the system message"
    if d.segment in ("tools", "prompt"):
        return f"the {d.segment}"
    return d.segment


def verdict(row: TemplateStats) -> str | None:
    """What the drift says of a static finding at the row's call site: confirmed, demoted or nothing."""
    found = breaking(row)
    if found:
        return f"{CONFIRMED} (token {found[0].token}, {where(found[0])})"
    if row.compared_requests >= MIN_COMPARED:
        return f"{DEMOTED} in {row.compared_requests} requests compared"
    return None


def judge(v: Violation, row: TemplateStats, numbers: Measured) -> Violation:
    """A static finding matched to template `row`: its measurement, with the drift's verdict."""
    said = verdict(row)
    measured = numbers._replace(verdict=said)
    if said is not None and said.startswith(DEMOTED):
        return v._replace(measured=measured, severity="info")
    return v._replace(measured=measured)


def findings(sites: Sequence[Site]) -> list[Violation]:
    """One KV902 per template with a breaking divergence."""
    rule = MeasuredDrift()
    out = []
    for t in sites:
        found = breaking(t.row)
        if not found:
            continue
        top = found[0]
        message = rule.format(
            requests=top.requests,
            compared=t.row.compared_requests,
            template=t.row.template,
            token=top.token,
            segment=where(top),
        )
        if top.excerpt is not None:
            message += f": {top.excerpt!r}" + (f" (was {top.previous!r})" if top.previous is not None else "")
        if len(found) > 1:
            message += f"; {len(found) - 1} more such position{'s' if len(found) > 2 else ''}"
        span = (t.line, t.line)
        out.append(
            Violation(rule.code, message, t.filename, t.line, 1, t.line, 1, rule.severity(None), None, span, t.measured)
        )
    return out
