"""The README's promptlint tour reports what it promises on the file it names, though this
repository's own `[tool.promptlint]` excludes that file (the bad app is bad on purpose)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from radixgate.linter.cli import main as promptlint

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def _in_repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the README's commands run from the checkout, under its pyproject.toml


def test_sarif_line_reports_the_bad_app(tmp_path: Path) -> None:
    assert "promptlint examples/bad_app.py --format sarif -o promptlint.sarif" in README
    out = tmp_path / "promptlint.sarif"
    assert promptlint(["examples/bad_app.py", "--format", "sarif", "-o", os.fspath(out)]) == 1
    results = json.loads(out.read_text())["runs"][0]["results"]
    assert len(results) >= 5 and all(r["locations"][0]["physicalLocation"] for r in results)
    # The folder alone is clean here: the exclude is why the tour names the file.
    assert promptlint(["examples", "--format", "sarif", "-o", os.fspath(out)]) == 0


def test_fix_line_fixes_a_scratch_copy(tmp_path: Path) -> None:
    assert "cp examples/bad_app.py /tmp/ && promptlint /tmp/bad_app.py --fix" in README
    copy = tmp_path / "bad_app.py"
    shutil.copy(ROOT / "examples/bad_app.py", copy)
    promptlint([os.fspath(copy), "--fix"])
    fixed = copy.read_text()
    assert "sort_keys=True" in fixed and "sorted(os.listdir(" in fixed
    assert "sort_keys=True" not in (ROOT / "examples/bad_app.py").read_text()  # the demo's app stays as it is


def test_stats_line_ranks_findings_by_measured_recomputation(tmp_path: Path, capsys) -> None:
    assert "promptlint examples/bad_app.py --stats http://127.0.0.1:30000" in README
    promptlint(["examples/bad_app.py", "--format", "json"])
    first = json.loads(capsys.readouterr().out)[0]
    line = first["location"]["row"]
    row = {
        "template": "bad",
        "source": f"examples/bad_app.py:{line}",
        "requests": 8,
        "prompt_tokens": 2500,
        "cached_tokens": 150,
        "hit_rate": 0.06,
        "static_prefix_tokens": 300,
        "distinct_static_prefixes": 8,
        "recomputed_static_tokens": 2308,
    }
    stats = tmp_path / "prompt_stats.json"
    stats.write_text(json.dumps({"templates": [row]}))
    assert promptlint(["examples/bad_app.py", "--stats", os.fspath(stats)]) == 1
    out = capsys.readouterr().out
    assert "All checks passed" not in out and "6%" in out and "2,350" in out  # measured: 2,500 - 150 tokens
