"""The checker: parse a file, read it as a project of one module, yield `Violation`s.

The analysis (`analysis/`) parses the file and collects its module's facts, reads the module body and
every function, and finds the prompt sites; here each site's findings (`ordering.check_site`) become
violations, deduplicated, with `# noqa` and `# promptlint: disable` applied.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from radixgate._wire import count_tokens, count_tokens_offline

from .analysis.facts import Parsed, parse
from .analysis.ordering import Finding, check_site, estimate_tokens
from .analysis.placeholders import locate
from .analysis.project import Project
from .analysis.scope import Elsewhere, Module
from .analysis.shape import Kind
from .analysis.site import Site
from .rules import (
    RULES,
    DynamicBeforeCacheBreakpoint,
    DynamicBeforeStatic,
    DynamicInSystemPrompt,
    ShortStaticPrefix,
    TurnBeforeDocuments,
)
from .settings import Settings
from .violation import Violation

_NOQA = re.compile(r"#\s*(?:noqa|promptlint:\s*disable)(?::\s*|=)?([A-Z0-9, ]*)", re.IGNORECASE)
_SLOT = re.compile(r"\{[^{}]*\}")  # a `{placeholder}` of a template's text
_ORDER_FAMILY = frozenset(
    {DynamicBeforeStatic.code, DynamicInSystemPrompt.code, TurnBeforeDocuments.code, DynamicBeforeCacheBreakpoint.code}
)


def check_source(source: str, filename: str, settings: Settings) -> list[Violation]:
    """All violations in one file's `source`, sorted by position, suppressions applied."""
    return check(source, filename, settings)[0]


def check(source: str, filename: str, settings: Settings) -> tuple[list[Violation], ast.Module | None]:
    """`check_source`, also returning the parsed tree (None when the file was not parsed)."""
    parsed = parse(source, filename)
    if parsed is None:
        return [], None
    project = Project()  # one file is a project too: its own wrappers are followed
    project.add(Path(filename), parsed, True)
    project.run()
    return violations_for(project.entries[0].sites, parsed, filename, settings), parsed.tree


def violations_for(sites: list[Site], parsed: Parsed, filename: str, settings: Settings) -> list[Violation]:
    violations = _dedupe(list(_violations(sites, filename, settings, parsed.module)))
    if violations and ("noqa" in parsed.source or "promptlint:" in parsed.source):
        tree = parsed.tree if parsed.module.bodies is None else ast.parse(parsed.source)  # its bodies were dropped
        violations = _suppress(violations, parsed.lines, _string_ends(tree))
    return violations


def _violations(sites: list[Site], filename: str, settings: Settings, module: Module) -> Iterator[Violation]:
    ordered = sorted(sites, key=lambda s: s.confidence != "high")
    for site in ordered:
        span = (getattr(site.node, "lineno", 0), getattr(site.node, "end_lineno", 0) or 0)
        for finding in check_site(site, settings.min_lost_tokens):
            if isinstance(finding.node, Elsewhere):
                continue  # the wrapper's own text: reported where the wrapper is
            if settings.is_enabled(finding.code):
                yield _to_violation(finding, filename, span, site.via, settings.min_lost_tokens)
                if module.variants and (twin := _in_variant(module, finding, settings.min_lost_tokens)) is not None:
                    yield _to_violation(finding._replace(node=twin), filename, span, site.via, settings.min_lost_tokens)
        hosted = site.provider is not None and site.confidence == "high" and site.via is None
        if hosted and settings.is_enabled(ShortStaticPrefix.code):
            short = _short_prefix(site, settings.min_static_tokens)
            if short is not None:
                yield _to_violation(short, filename, span)


def _in_variant(module: Module, finding: Finding, threshold: int) -> ast.AST | None:
    """The same placeholder in the other variant of a template chosen by a conditional, when the
    finding is at a placeholder of the variant that was read (`EN if lang == "en" else ZH`: both are
    sent), and, for static text pushed out, when the other variant has that much after it too."""
    needle = getattr(finding.node, "value", None)
    row = getattr(finding.node, "lineno", 0)
    if not isinstance(needle, str) or not needle.startswith("{"):
        return None
    for first, other in module.variants.items():
        if first.lineno <= row <= (first.end_lineno or first.lineno):
            twin = locate(module, other, needle)
            after = str(other.value).partition(needle)[2].partition("}")[2]
            runs = _SLOT.split(after) if finding.tokens is not None else ()
            if twin is other or (runs and max(estimate_tokens(run) for run in runs) < threshold):
                return None
            return twin
    return None


def _to_violation(
    finding: Finding, filename: str, span: tuple[int, int], via: str | None = None, threshold: int = 64
) -> Violation:
    rule = RULES[finding.code]
    node = finding.node
    row, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
    end_row = getattr(node, "end_lineno", None) or row
    end_col = (getattr(node, "end_col_offset", None) or col - 1) + 1
    holder_end = getattr(node, "holder_end", end_row)
    message = rule.format(**finding.fields) + (f" (sent by {via})" if via else "")
    return Violation(
        rule.code,
        message,
        filename,
        row,
        col,
        end_row,
        end_col,
        rule.severity(finding.change, finding.tokens, threshold),
        None,
        (span[0], max(span[1], holder_end)),
    )


def _short_prefix(site: Site, minimum: int) -> Finding | None:
    """KV301: the static text before the first non-static part, when it is known to end there
    (a value in a system or tools segment may be a constant from another module)."""
    parts = [(part, seg.role) for seg in site.segments for part in seg.shape]
    head = []
    for part, role in parts:
        if part.kind is not Kind.TEXT:
            if part.kind is Kind.UNKNOWN and role in (None, "system", "tools"):
                return None
            break
        head.append(part)
    chars = sum(p.chars for p in head)
    if not chars:
        return None
    known = "".join(p.label for p in head)
    counted = count_tokens_offline(known)  # tiktoken's encoder only where the offline ranks are missing
    tokens = (count_tokens(known) if counted is None else counted) + max(0, chars - len(known)) // 4
    if tokens >= minimum:
        return None
    return Finding(ShortStaticPrefix.code, site.node, {"tokens": tokens, "minimum": minimum}, None)


def _dedupe(violations: list[Violation]) -> list[Violation]:
    seen: set[tuple] = set()
    out: list[Violation] = []
    for v in violations:
        family = "order" if v.code in _ORDER_FAMILY else v.code
        key = (family, v.row, v.col)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return sorted(out, key=lambda v: (v.row, v.col, v.code))


def _string_ends(tree: ast.Module) -> list[tuple[int, int]]:
    """(first, last) lines of every multi-line string literal."""
    return [
        (n.lineno, n.end_lineno)
        for n in ast.walk(tree)
        if isinstance(n, (ast.JoinedStr, ast.Constant)) and n.end_lineno and n.end_lineno > n.lineno
    ]


def _suppress(violations: list[Violation], lines: list[str], strings: list[tuple[int, int]]) -> list[Violation]:
    """Drop violations with `# noqa[: CODES]` or `# promptlint: disable=CODES` on their first or
    last line, or after the closing quotes of the multi-line string they sit in."""
    kept = []
    for v in violations:
        rows = {v.row, v.end_row} | {end for start, end in strings if start <= v.row <= end}
        if v.span and v.code == ShortStaticPrefix.code:
            rows.add(v.span[1])
        if not any(_suppressed(lines[r - 1], v.code) for r in rows if 0 < r <= len(lines)):
            kept.append(v)
    return kept


def _suppressed(line: str, code: str) -> bool:
    if "#" not in line:
        return False
    match = _NOQA.search(line)
    if match is None:
        return False
    codes = [c.strip().upper() for c in match.group(1).split(",") if c.strip()]
    return not codes or any(code.startswith(c) for c in codes)
