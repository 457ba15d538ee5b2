"""Severity: `info` does not fail by default, `--fail-on` / `fail-on`, per-rule `severity`; a file that does
not parse is one E999 finding and the run goes on; configuration and `--stats` failures are exit 2, one line."""

from __future__ import annotations

import pytest
from promptlint_assert import LONG

from radixgate.linter import cli
from radixgate.linter.reporters import summary
from radixgate.linter.violation import Violation

KV101 = f"""from datetime import datetime
from openai import OpenAI

client = OpenAI()


def reply(question):
    system = f"Current time: {{datetime.now()}}. {LONG}"
    return client.chat.completions.create(model="m", messages=[
        {{"role": "system", "content": system}}, {{"role": "user", "content": question}}])
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text(KV101)
    return tmp_path


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_fail_on_and_per_rule_severity(project, capsys):
    code, out, _ = run(capsys, "app.py")
    assert code == 1 and "KV101 [warning]" in out and out.endswith("Found 1 finding: 1 warning.\n")
    assert run(capsys, "app.py", "--fail-on", "error")[0] == 0  # reported, not failing
    (project / "pyproject.toml").write_text('[tool.promptlint]\nseverity = { KV1 = "info" }\n')
    code, out, _ = run(capsys, "app.py")
    assert code == 0 and "KV101 [info]" in out and "1 info." in out  # info never fails by default
    assert run(capsys, "app.py", "--fail-on", "info")[0] == 1
    (project / "pyproject.toml").write_text('[tool.promptlint]\nfail-on = "info"\nseverity = { KV101 = "info" }\n')
    assert run(capsys, "app.py")[0] == 1
    (project / "pyproject.toml").write_text('[tool.promptlint]\nseverity = { KV101 = "error" }\n')
    code, out, _ = run(capsys, "app.py", "--fail-on", "error")
    assert code == 1 and "KV101 [error]" in out


@pytest.mark.parametrize(
    "config, message",
    [
        ('severity = { KV999 = "info" }', "severity.KV999: unknown rule code"),
        ('severity = { KV101 = "low" }', "severity.KV101: unknown severity 'low'"),
        ('fail-on = "never"', "fail-on: unknown severity 'never'"),
        ("severity = 3", "severity must be a table"),
    ],
)
def test_unknown_rule_or_severity_is_exit_2_naming_the_key(project, capsys, config, message):
    (project / "pyproject.toml").write_text(f"[tool.promptlint]\n{config}\n")
    code, out, err = run(capsys, "app.py")
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err and out == ""


def test_a_file_that_does_not_parse_is_one_finding_and_the_run_goes_on(project, capsys):
    (project / "broken.py").write_text("prompt = 1\ndef f(:\n    pass\n")
    (project / "latin.py").write_bytes(b"prompt = '\xff'\n")
    code, out, err = run(capsys, ".")
    assert code == 1 and err == ""
    assert "broken.py:2:7: E999 [error] syntax error: invalid syntax" in out
    assert "latin.py:1:1: E999 [error] cannot read:" in out
    assert "app.py:8:" in out and "KV101" in out  # the other files were linted
    assert out.endswith("Found 3 findings: 2 errors, 1 warning.\n")
    code, out, _ = run(capsys, "broken.py", "--fix")  # the fix path too
    assert code == 1 and "E999" in out
    assert run(capsys, "broken.py", "--select", "KV2")[0] == 1  # E999 whatever is selected


def test_unreachable_stats_url_is_exit_2_with_one_line(project, capsys):
    code, out, err = run(capsys, "app.py", "--stats", "http://127.0.0.1:9/v1/prompt_stats")
    assert code == 2 and err.startswith("promptlint: error: cannot read statistics from http://127.0.0.1:9")
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""


def test_summary_counts_by_severity():
    def v(level: str) -> Violation:
        return Violation("KV101", "m", "f.py", 1, 1, 1, 1, level)

    assert summary([v("warning")] * 3 + [v("info")]) == "Found 4 findings: 3 warnings, 1 info."
    assert summary([v("error")]) == "Found 1 finding: 1 error."
