"""promptlint on real LLM applications: precision and recall against hand labels.

    python -m radixgate.bench.lint_realworld --sources /work/realworld/src
    python -m radixgate.bench.lint_realworld --extract /work/.mirror --sources /work/realworld/src

The sources (public repositories, `tests/linter/realworld/provenance.jsonl`) are not part of this
repository: `--extract MIRROR` writes them from fetched git mirrors (`MIRROR/owner+name/repo`, bare) at the
recorded commits. Labels are in `tests/linter/realworld/labels_*.jsonl` (see the README there).

A finding is matched to the labeled site whose line span holds it (the narrowest one). Precision: findings
at `breaker` sites over all findings at labeled sites (findings at no labeled site are listed as
unlabeled). Recall: `breaker` sites with a finding over all `breaker` sites. The `before` row is computed
from the findings recorded with the labels, before the rules changed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from radixgate.linter.runner import lint_paths
from radixgate.linter.settings import Settings

DATA = Path(__file__).resolve().parents[1] / "tests" / "linter" / "realworld"


class Row(NamedTuple):
    name: str
    repos: int
    files: int
    findings: int
    tp: int
    fp: int
    unlabeled: int
    breakers: int
    caught: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")

    @property
    def recall(self) -> float:
        return self.caught / self.breakers if self.breakers else float("nan")


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def folder(repo: str) -> str:
    return repo.replace("/", "+", 1)


def extract(mirror: Path, sources: Path, provenance: list[dict]) -> int:
    """Write every file of `provenance` from the git mirrors; the number written."""
    written = 0
    for row in provenance:
        git_dir = mirror / folder(row["repo"]) / "repo"
        shown = subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{row['commit']}:{row['path']}"], capture_output=True
        )
        if shown.returncode != 0:
            print(f"warning: {row['repo']} {row['path']}: not in the mirror", file=sys.stderr)
            continue
        dest = sources / folder(row["repo"]) / row["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(shown.stdout)
        written += 1
    return written


def lint_repos(sources: Path, repos: list[str], settings: Settings) -> tuple[list[dict], int]:
    """Findings of promptlint over each repository's files (one project per repository)."""
    findings: list[dict] = []
    lines = 0
    for repo in repos:
        root = sources / folder(repo)
        if not root.is_dir():
            continue
        result = lint_paths([str(root)], settings)
        lines += result.lines
        for v in result.violations:
            path = Path(v.filename).resolve().relative_to(root.resolve()).as_posix()
            findings.append({"repo": repo, "path": path, "line": v.row, "code": v.code, "message": v.message})
    return findings, lines


def match(finding: dict, labels: dict[tuple[str, str], list[dict]]) -> dict | None:
    spans = [
        lab
        for lab in labels.get((finding["repo"], finding["path"]), [])
        if lab["line"] <= finding["line"] <= lab["end_line"]
    ]
    return min(spans, key=lambda lab: lab["end_line"] - lab["line"]) if spans else None


def score(name: str, repos: list[str], files: int, findings: list[dict], labels: list[dict]) -> tuple[Row, list]:
    by_file: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for lab in labels:
        by_file[(lab["repo"], lab["path"])].append(lab)
    tp = fp = 0
    unlabeled = []
    hit: set[int] = set()
    for f in findings:
        lab = match(f, by_file)
        if lab is None or lab["verdict"] == "unclear":
            unlabeled.append(f)
            continue
        hit.add(id(lab))
        if lab["verdict"] == "breaker":
            tp += 1
        else:
            fp += 1
    # Recall only over sites labelled before the change (findings then, and sampled unflagged sites).
    breakers = [
        lab
        for lab in labels
        if lab["verdict"] == "breaker" and lab.get("kind") in ("site", "finding") and lab.get("recall", True)
    ]
    caught = sum(1 for lab in breakers if id(lab) in hit)
    row = Row(name, len(repos), files, len(findings), tp, fp, len(unlabeled), len(breakers), caught)
    return row, unlabeled


def before_findings(labels: list[dict]) -> list[dict]:
    return [
        {"repo": lab["repo"], "path": lab["path"], "line": lab["line"], "code": code}
        for lab in labels
        for code in lab.get("before", [])
    ]


def table(rows: list[Row]) -> str:
    head = f"{'half':<16}{'repos':>6}{'files':>7}{'findings':>9}{'TP':>5}{'FP':>5}{'unlab.':>7}"
    head += f"{'precision':>10}{'breakers':>9}{'caught':>7}{'recall':>8}"
    out = [head]
    for r in rows:
        out.append(
            f"{r.name:<16}{r.repos:>6}{r.files:>7}{r.findings:>9}{r.tp:>5}{r.fp:>5}{r.unlabeled:>7}"
            f"{r.precision:>10.2f}{r.breakers:>9}{r.caught:>7}{r.recall:>8.2f}"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixgate bench lint-realworld", description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, default=os.environ.get("RADIXGATE_REALWORLD_SOURCES"))
    parser.add_argument("--extract", type=Path, metavar="MIRROR", help="first write the sources from git mirrors")
    parser.add_argument("--data", type=Path, default=DATA, help="provenance and labels folder")
    parser.add_argument("--verbose", "-v", action="store_true", help="list findings and missed breakers")
    args = parser.parse_args(argv)
    if args.sources is None:
        print("error: pass --sources DIR (or set RADIXGATE_REALWORLD_SOURCES)", file=sys.stderr)
        return 2
    provenance = read_jsonl(args.data / "provenance.jsonl")
    if args.extract:
        print(f"extracted {extract(args.extract, args.sources, provenance)} files", file=sys.stderr)
    if not args.sources.is_dir():
        print(
            f"error: sources folder {args.sources} not found (fetch the repositories, then --extract)", file=sys.stderr
        )
        return 2
    split = {row["repo"]: row["split"] for row in provenance}
    files = defaultdict(int)
    for row in provenance:
        files[row["split"]] += 1
    rows: list[Row] = []
    test_labels = read_jsonl(args.data / "labels_test.jsonl")
    after_labels = read_jsonl(args.data / "labels_test_after.jsonl")
    dev_labels = read_jsonl(args.data / "labels_dev.jsonl")
    test_repos = sorted(r for r, s in split.items() if s == "test")
    dev_repos = sorted(r for r, s in split.items() if s == "dev")
    before, _ = score("test, before", test_repos, files["test"], before_findings(test_labels), test_labels)
    rows.append(before)
    started = time.perf_counter()
    found, lines = lint_repos(args.sources, test_repos, Settings())
    after_all = test_labels + [dict(lab, recall=False) for lab in after_labels]
    test_row, test_unlabeled = score("test, now", test_repos, files["test"], found, after_all)
    rows.append(test_row)
    dev_found, dev_lines = lint_repos(args.sources, dev_repos, Settings())
    dev_row, dev_unlabeled = score("dev, now", dev_repos, files["dev"], dev_found, dev_labels)
    rows.append(dev_row)
    elapsed = time.perf_counter() - started
    sys.stdout.write(table(rows))
    print(f"({lines + dev_lines:,} lines linted in {elapsed:.1f} s; precision counts labeled findings only)")
    if args.verbose:
        for name, unlabeled in (("test", test_unlabeled), ("dev", dev_unlabeled)):
            for f in unlabeled:
                print(f"  unlabeled {name}: {f['repo']} {f['path']}:{f['line']} {f['code']} {f.get('message', '')}")
        by_file: dict[tuple[str, str], list[dict]] = defaultdict(list)
        for f in found:
            by_file[(f["repo"], f["path"])].append(f)
        for lab in test_labels:
            if lab["verdict"] == "breaker" and not any(
                lab["line"] <= f["line"] <= lab["end_line"] for f in by_file[(lab["repo"], lab["path"])]
            ):
                print(f"  missed: {lab['repo']} {lab['path']}:{lab['line']} {lab['reason']}")
        for f in found:
            print(f"  finding: {f['repo']} {f['path']}:{f['line']} {f['code']} {f['message']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
