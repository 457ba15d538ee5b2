"""Read one prompt site in model order and decide which rules it breaks.

For each dynamic part, the first of these that holds is reported:
1. a `cache_control` breakpoint follows it                       -> KV104
2. it is the question or history, and a shared document follows -> KV103
("enough static text": a run of consecutive static text of at least `min-static-chars`.)
3. enough static text follows it in the same segment            -> KV101
4. it is in the system prompt and static content follows later  -> KV102
5. enough static text follows it in later segments              -> KV101
6. a shared document follows it                                 -> KV103
7. it changes every request and the conversation history follows -> KV101
A flaw (KV201-KV204) is reported when something cacheable follows the flawed value (static
text, a document, or a later dynamic value that keeps the flawed value inside the prefix), or
always for tool schemas and system prompts. Nothing is reported for values that come after all
static content: that is where dynamic content belongs.
"""

from __future__ import annotations

import ast
from typing import NamedTuple

from .rules import DynamicBeforeCacheBreakpoint, DynamicBeforeStatic, DynamicInSystemPrompt, TurnBeforeDocuments
from .shape import Change, Kind, Part
from .sinks import Site


class Finding(NamedTuple):
    """A rule broken at `node`, with the fields its message template needs."""

    code: str
    node: ast.AST | None  # None: the finding has no location of its own (reported at the call)
    fields: dict
    change: Change | None


def _describe(part: Part) -> str:
    how = {
        Change.PER_REQUEST: "changes every request",
        Change.PER_SESSION: "changes per user",
        Change.PER_DAY: "changes daily",
    }.get(part.change, "")
    kind = {
        Kind.TIME: "timestamp",
        Kind.ID: "identifier",
        Kind.RANDOM: "random value",
        Kind.TURN: "per-turn input",
        Kind.HISTORY: "conversation history",
    }.get(part.kind, "value")
    return f"{kind} `{part.label}` ({how})" if how else f"{kind} `{part.label}`"


def check_site(site: Site, min_static_chars: int) -> list[Finding]:
    flat = [(part, i, seg.role) for i, seg in enumerate(site.segments) for part in seg.shape]
    findings: list[Finding] = []
    reported: set[tuple[str, str]] = set()  # one finding per value and rule in a prompt
    for index, (part, seg, role) in enumerate(flat):
        rest = flat[index + 1 :]
        if part.is_dynamic and (site.confidence == "high" or part.change >= Change.PER_SESSION):
            finding = _dynamic(part, seg, role, rest, min_static_chars, site.confidence)
            if finding is not None and (finding.code, part.label) not in reported:
                reported.add((finding.code, part.label))
                findings.append(finding)
        for flaw in part.flaws:
            in_prefix = role in ("tools", "system") or _cacheable_after(rest, min_static_chars)
            if flaw.always or in_prefix:
                findings.append(Finding(flaw.code, flaw.node, {"label": flaw.label}, None))
    return findings


def _dynamic(part: Part, seg: int, role: str | None, rest: list, threshold: int, confidence: str) -> Finding | None:
    label = _describe(part)
    node = part.node
    if any(p.kind is Kind.BREAK for p, _, _ in rest):
        return Finding(DynamicBeforeCacheBreakpoint.code, node, {"label": label}, part.change)
    doc = next((p for p, _, _ in rest if p.kind is Kind.DOC), None)
    if doc is not None and part.kind in (Kind.TURN, Kind.HISTORY):
        return Finding(TurnBeforeDocuments.code, node, {"label": label, "doc": doc.label}, part.change)
    same = _longest_static_run([p for p, s, _ in rest if s == seg])
    total = _longest_static_run([p for p, _, _ in rest])
    if same >= threshold:
        return Finding(DynamicBeforeStatic.code, node, {"label": label, "what": _chars(same)}, part.change)
    if total >= threshold and confidence == "high":
        code = DynamicInSystemPrompt.code if role == "system" else DynamicBeforeStatic.code
        return Finding(code, node, {"label": label, "what": _chars(total)}, part.change)
    if doc is not None and confidence == "high":
        return Finding(TurnBeforeDocuments.code, node, {"label": label, "doc": doc.label}, part.change)
    history = any(p.kind is Kind.HISTORY for p, _, _ in rest)
    if history and part.change is Change.PER_REQUEST and part.kind is not Kind.HISTORY:
        return Finding(
            DynamicBeforeStatic.code, node, {"label": label, "what": "the conversation history"}, part.change
        )
    return None


def _longest_static_run(parts: list[Part]) -> int:
    """The longest block of consecutive static text: labels between values are not a block
    worth caching, a paragraph of instructions is."""
    best = run = 0
    for p in parts:
        if p.kind is Kind.TEXT:
            run += p.chars
            best = max(best, run)
        elif p.kind is not Kind.BREAK:
            run = 0
    return best


def _chars(n: int) -> str:
    return f"{n:,} characters of static text"


def _cacheable_after(rest: list, threshold: int) -> bool:
    """Whether the flawed value is inside the prefix of what follows: enough static text, or
    any value at all (the question after shuffled examples)."""
    static = sum(p.chars for p, _, _ in rest if p.kind is Kind.TEXT)
    return static >= threshold or any(p.kind not in (Kind.TEXT, Kind.BREAK) for p, _, _ in rest)
