"""Reporters: format violations as text, JSON (ruff's shape), SARIF 2.1.0 or GitHub workflow
commands. They only format; they decide nothing."""

from __future__ import annotations

import inspect
import json
from collections import Counter
from collections.abc import Callable

from radixgate import __version__

from .rules import RULES
from .violation import Fix, Violation

TOOL_URI = "https://github.com/radixgate/radixgate/blob/main/docs/rules.md"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def summary(violations: list[Violation]) -> str:
    """`Found 5 findings: 1 error, 3 warnings, 1 info.`: the count by severity, highest first."""
    counts = Counter(v.severity for v in violations)
    parts = [
        f"{counts[level]} {level}{'s' if counts[level] != 1 and level != 'info' else ''}"
        for level in ("error", "warning", "info")
        if counts[level]
    ]
    total = len(violations)
    return f"Found {total} finding{'s' if total != 1 else ''}: {', '.join(parts)}."


def text(violations: list[Violation]) -> str:
    """`path:row:col: CODE [severity] message`, one per line, then a count."""
    lines = []
    for v in violations:
        mark = " [*]" if v.fix is not None and v.fix.applicability == "safe" else ""
        lines.append(f"{v.filename}:{v.row}:{v.col}: {v.code}{mark} [{v.severity}] {v.full_message}")
    if violations:
        fixable = sum(1 for v in violations if v.fix and v.fix.applicability == "safe")
        lines.append(summary(violations) + (f"\n[*] {fixable} fixable with `--fix`." if fixable else ""))
    return "\n".join(lines) + ("\n" if lines else "")


def _fix_json(fix: Fix | None) -> dict | None:
    if fix is None:
        return None
    return {
        "applicability": fix.applicability,
        "message": fix.message,
        "edits": [
            {
                "content": e.content,
                "location": {"row": e.row, "column": e.col + 1},
                "end_location": {"row": e.end_row, "column": e.end_col + 1},
            }
            for e in fix.edits
        ],
    }


def as_json(violations: list[Violation]) -> str:
    """A JSON list in ruff's shape (`code`, `message`, `filename`, `location`, `end_location`,
    `fix`, `noqa_row`, `url`), plus `severity` and `measured` when statistics were given."""
    out = []
    for v in violations:
        item = {
            "cell": None,
            "code": v.code,
            "message": v.full_message,
            "filename": v.filename,
            "location": {"row": v.row, "column": v.col},
            "end_location": {"row": v.end_row, "column": v.end_col},
            "fix": _fix_json(v.fix),
            "noqa_row": v.row,
            "url": f"{TOOL_URI}#{v.code.lower()}",
            "severity": v.severity,
        }
        if v.measured is not None:
            item["measured"] = v.measured._asdict()
        out.append(item)
    return json.dumps(out, indent=2) + "\n"


def sarif(violations: list[Violation]) -> str:
    """One SARIF 2.1.0 run with every rule described and one result per violation."""
    codes = list(RULES)
    rules = []
    for code in codes:
        rule = RULES[code]
        doc = inspect.cleandoc(type(rule).__doc__ or "")
        summary = doc.split("## Why", 1)[0].replace("## What it does", "").strip()
        rules.append(
            {
                "id": code,
                "name": rule.name,
                "shortDescription": {"text": rule.name.replace("-", " ")},
                "fullDescription": {"text": " ".join(summary.split())},
                "help": {"text": doc, "markdown": doc},
                "helpUri": f"{TOOL_URI}#{code.lower()}",
                "defaultConfiguration": {"level": _SARIF_LEVEL[rule.severity(None)]},
            }
        )
    results = []
    for v in violations:
        result = {
            "ruleId": v.code,
            "ruleIndex": codes.index(v.code),
            "level": _SARIF_LEVEL[v.severity],
            "message": {"text": v.full_message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": v.filename.replace("\\", "/")},
                        "region": {
                            "startLine": v.row,
                            "startColumn": v.col,
                            "endLine": v.end_row,
                            "endColumn": max(v.end_col, 1),
                        },
                    }
                }
            ],
        }
        if v.measured is not None:
            result["properties"] = {"measured": v.measured._asdict()}
            result["rank"] = round(100.0 * (1.0 - v.measured.hit_rate), 1)
        results.append(result)
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "promptlint", "version": __version__, "informationUri": TOOL_URI, "rules": rules}
                },
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")


def github(violations: list[Violation]) -> str:
    """GitHub Actions workflow commands: `::error file=...,line=...,col=...::message`."""
    lines = []
    for v in violations:
        props = (
            f"file={_escape_property(v.filename)},line={v.row},col={v.col},"
            f"endLine={v.end_row},endColumn={v.end_col},"
            f"title={_escape_property(f'promptlint ({v.code})')}"
        )
        lines.append(f"::{_GITHUB_LEVEL[v.severity]} {props}::{_escape_data(f'{v.code} {v.full_message}')}")
    return "\n".join(lines) + ("\n" if lines else "")


def statistics(violations: list[Violation]) -> str:
    """`--statistics`: count per rule, most frequent first."""
    counts = Counter(v.code for v in violations)
    fixable = Counter(v.code for v in violations if v.fix and v.fix.applicability == "safe")
    return "".join(
        f"{n:>5}\t{code}\t{'[*] ' if fixable[code] else ''}{RULES[code].name}\n" for code, n in counts.most_common()
    )


REPORTERS: dict[str, Callable[[list[Violation]], str]] = {
    "text": text,
    "json": as_json,
    "sarif": sarif,
    "github": github,
}
