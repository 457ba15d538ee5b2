"""promptlint's peak memory and CPU time on real trees, each target linted in a fresh process.

    python -m radixgate.bench.lint_memory /tmp/rw/Skyvern-AI+skyvern /tmp/rw/topoteretes+cognee /tmp/rw
    python -m radixgate.bench.lint_memory --each /tmp/rw --snapshot /tmp/findings-before
    python -m radixgate.bench.lint_memory --each /tmp/rw --snapshot /tmp/findings-after
    cmp -s /tmp/findings-before/ALL.jsonl /tmp/findings-after/ALL.jsonl  # and each repository's file

Each target (a folder or file; `--each FOLDER`: every folder inside it, then the folder itself) is linted
by `lint_paths` with default settings in a new interpreter started from a bare launcher, so that its
peak resident set (`ru_maxrss`) is its own and not the parent's counted at fork (as in
`tests/linter/test_lint_memory.py`). Prints one row per target: lines, files, findings, peak RSS, CPU
seconds. `--snapshot DIR` writes every finding of each target (all its fields, one JSON list a line,
in the linter's order) to `DIR/<target name>.jsonl`, for a byte comparison before and after a change.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# Linux counts a parent's memory at fork in the child's `ru_maxrss`: the measuring process is started
# from a bare interpreter.
LAUNCH = """
import subprocess, sys
done = subprocess.run([sys.executable, "-c", *sys.argv[1:]], capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"""
MEASURE = """
import json, resource, sys
from radixgate.linter.runner import lint_paths
from radixgate.linter.settings import Settings
result = lint_paths([sys.argv[1]], Settings())
usage = resource.getrusage(resource.RUSAGE_SELF)
if sys.argv[2]:
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        for v in result.violations:
            out.write(json.dumps(list(v), ensure_ascii=False) + "\\n")
print(json.dumps({"lines": result.lines, "files": len(result.files), "findings": len(result.violations),
                  "peak_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}))
"""


def measure(target: Path, snapshot: Path | None = None) -> dict:
    """Lines, files, findings, peak RSS (MB) and CPU seconds of linting `target` in a fresh process."""
    out = "" if snapshot is None else str(snapshot)
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, MEASURE, str(target), out], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{target}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radixgate.bench.lint_memory", description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", type=Path, help="folders or files, each linted alone")
    parser.add_argument("--each", type=Path, help="every folder inside this one, then the folder itself")
    parser.add_argument("--snapshot", type=Path, help="write each target's findings to DIR/<name>.jsonl")
    args = parser.parse_args(argv)
    targets = list(args.targets)
    if args.each is not None:
        targets += sorted(p for p in args.each.iterdir() if p.is_dir()) + [args.each]
    if not targets:
        parser.error("give targets or --each FOLDER")
    if args.snapshot is not None:
        args.snapshot.mkdir(parents=True, exist_ok=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'target':<40} {'lines':>8} {'files':>6} {'findings':>8} {'peak MB':>8} {'CPU s':>7}")
    for target in targets:
        name = "ALL" if target == args.each else target.name
        snapshot = None if args.snapshot is None else args.snapshot / f"{name}.jsonl"
        row = measure(target, snapshot)
        print(
            f"{name:<40} {row['lines']:>8} {row['files']:>6} {row['findings']:>8} "
            f"{row['peak_mb']:>8.1f} {row['cpu_s']:>7.1f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
