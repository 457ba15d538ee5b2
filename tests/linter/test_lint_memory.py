"""Memory stays bounded by the largest group of modules linked by imports, not by the tree: a generated
tree of 100,000+ lines is linted in a fresh process whose peak resident set (`ru_maxrss`) stays at most
100 MB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from radixgate.bench.lint import generate

# Linux counts a parent's memory at fork in the child's `ru_maxrss`, so the measuring process is started
# from a small launcher (a bare interpreter, about 10 MB), not from pytest's large process.
LAUNCH = """
import subprocess, sys
done = subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"""
MEASURE = """
import json, resource, sys
from radixgate.linter.runner import lint_paths
from radixgate.linter.settings import Settings
result = lint_paths([sys.argv[1]], Settings())
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
print(json.dumps({"lines": result.lines, "files": len(result.files), "findings": len(result.violations),
                  "peak_mb": peak_kib / 1024}))
"""


def test_peak_memory_on_a_100k_line_tree_is_at_most_100_mb(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    files, lines = generate(tmp_path / "tree", 100_000)
    assert lines >= 100_000
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, MEASURE, str(tmp_path / "tree")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    assert measured["lines"] >= 100_000 and measured["files"] == files and measured["findings"] > 1000
    assert measured["peak_mb"] <= 100, measured
