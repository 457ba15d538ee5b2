"""The command line: exit codes, rule selection, configuration, fixes, suppression."""

import json

import pytest

from radixgate.linter import cli

LONG = (
    "You are a meticulous support assistant for Acme. Answer in three sentences, cite the "
    "policy section, and never invent order numbers. Refunds follow section 4 of the returns policy, "
    "shipping questions follow section 7, and anything about accounts, billing or legal matters goes "
    "to a human agent with a one-line summary of the ticket."
)
BAD = f"""import json
from datetime import datetime


def build(tools, q):
    system = f"{{datetime.now()}} {LONG}" + json.dumps(tools)
    return [{{"role": "system", "content": system}}, {{"role": "user", "content": q}}]
"""
CLEAN = f'''def build(q):
    return [{{"role": "system", "content": "{LONG}"}}, {{"role": "user", "content": q}}]
'''


@pytest.fixture()
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad.py").write_text(BAD)
    (tmp_path / "src" / "clean.py").write_text(CLEAN)
    return tmp_path


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_exit_codes(project, capsys):
    assert run(capsys, "src/clean.py")[0] == 0
    code, out, _ = run(capsys, "src")
    assert code == 1 and "src/bad.py:6:17: KV101 [warning]" in out and "Found 2 findings: 2 warnings." in out
    assert run(capsys, "src", "--exit-zero")[0] == 0


@pytest.mark.parametrize(
    "args, codes",
    [
        (["--select", "KV2"], ["KV201"]),
        (["--ignore", "KV101"], ["KV201"]),
        (["--select", "KV101,KV201", "--ignore", "KV2"], ["KV101"]),
        (["--select", "KV3", "--extend-select", "KV201"], ["KV201"]),
    ],
)
def test_selection_by_code_and_prefix(project, capsys, args, codes):
    code, out, _ = run(capsys, "src", "--format", "json", *args)
    assert sorted(v["code"] for v in json.loads(out)) == codes


def test_pyproject_configuration_and_exclude(project, capsys):
    (project / "pyproject.toml").write_text('[tool.promptlint]\nignore = ["KV201"]\nexclude = ["src/skip.py"]\n')
    (project / "src" / "skip.py").write_text(BAD)
    code, out, _ = run(capsys, "src", "--format", "json")
    assert [(v["filename"], v["code"]) for v in json.loads(out)] == [("src/bad.py", "KV101")]
    # An excluded file named on the command line is linted unless --force-exclude (pre-commit).
    assert run(capsys, "src/skip.py")[0] == 1
    assert run(capsys, "src/skip.py", "--force-exclude")[0] == 0
    assert run(capsys, "src/skip.py", "--isolated", "--select", "KV201")[0] == 1


@pytest.mark.parametrize(
    "config, message",
    [
        ('[tool.promptlint]\nselect = ["XX1"]\n', "unknown rule code"),
        ('[tool.promptlint]\nmin-static-tokens = "many"\n', "must be an integer"),
        ("[tool.promptlint]\ncolour = true\n", "unknown key"),
        ("[tool.promptlint\n", "cannot read configuration"),
    ],
)
def test_bad_configuration_is_exit_2_with_a_message(project, capsys, config, message):
    (project / "pyproject.toml").write_text(config)
    code, out, err = run(capsys, "src")
    assert code == 2 and message in err and "Traceback" not in err and out == ""


def test_tool_failures_are_exit_2_never_a_traceback(project, capsys):
    code, _, err = run(capsys, "missing.py")
    assert code == 2 and "no such file" in err
    assert run(capsys, "--select", "KV999", "src")[0] == 2
    assert run(capsys, "--explain", "KV999")[0] == 2


def test_explain_prints_the_rule_documentation(capsys):
    code, out, _ = run(capsys, "--explain", "kv101")
    assert code == 0
    for heading in (
        "# dynamic-before-static (KV101)",
        "## What it does",
        "## Why is this bad?",
        "## Example",
        "## Use instead",
    ):
        assert heading in out


def test_fix_applies_safe_fixes_and_leaves_the_rest(project, capsys):
    code, out, _ = run(capsys, "src/bad.py", "--fix")
    assert code == 1 and "KV201" not in out and "KV101" in out
    assert "json.dumps(tools, sort_keys=True)" in (project / "src" / "bad.py").read_text()
    code, out, _ = run(capsys, "src/bad.py", "--unsafe-fixes")
    assert code == 0
    fixed = (project / "src" / "bad.py").read_text()
    assert fixed.index("meticulous") < fixed.index("datetime.now()}")


def test_statistics_counts_per_rule(project, capsys):
    (project / "src" / "bad2.py").write_text(BAD)
    code, out, _ = run(capsys, "src", "--statistics")
    assert code == 1
    assert out.splitlines() == ["    2\tKV101\tdynamic-before-static", "    2\tKV201\t[*] unsorted-json-dumps"]


def test_output_file_and_version(project, capsys):
    assert run(capsys, "src", "--format", "json", "-o", "out.json")[0] == 1
    assert len(json.loads((project / "out.json").read_text())) == 2
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("promptlint ")
