"""The closed loop against a live server: `radixgate demo` runs the bad app, promptlint --stats,
then the fixed app, and reports both apps' measured hit rates."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLANTED_WITH_TRAFFIC = {"KV101", "KV102", "KV103", "KV201", "KV202", "KV203", "KV204"}


def test_demo_measures_the_bad_app_low_and_the_fixed_app_near_ideal(tmp_path):
    out = tmp_path / "demo.json"
    run = subprocess.run(
        [sys.executable, "-m", "radixgate._cli", "demo", "--requests", "20", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "before / after" in run.stdout and "/dashboard" in run.stdout
    report = json.loads(out.read_text())
    before, after = report["rows"]
    assert before["requests"] == after["requests"] == 20
    assert before["hit_rate"] < 0.5 * after["hit_rate"]
    assert after["hit_rate"] >= 0.95 * after["ideal_hit_rate"]

    findings = report["findings"]
    assert {f["filename"] for f in findings} == {"examples/bad_app.py"}  # the fixed app is clean
    measured = [f for f in findings if f.get("measured")]
    assert PLANTED_WITH_TRAFFIC <= {f["code"] for f in measured}
    waste = [f["measured"]["recomputed_tokens"] for f in measured]
    assert waste == sorted(waste, reverse=True), "findings must be ranked by measured waste"
    assert findings[: len(measured)] == measured, "findings with measured waste come first"
    top = measured[0]
    assert top["location"]["row"] in range(70, 90)  # support_chat, the most wasteful call site
    assert "measured hit rate" in top["message"] and "prompt tokens recomputed" in top["message"]
