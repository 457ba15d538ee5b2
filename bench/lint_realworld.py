"""promptlint on real LLM applications: precision and recall against hand labels.

    python -m radixgate.bench.lint_realworld --sources /work/realworld/src
    python -m radixgate.bench.lint_realworld --extract /work/.mirror --sources /work/realworld/src

The sources (public repositories, `tests/linter/realworld/provenance.jsonl`) are not part of this
repository: `--extract MIRROR` writes them from fetched git mirrors (`MIRROR/owner+name/repo`, bare) at the
recorded commits. Labels are in `tests/linter/realworld/labels_*.jsonl` (see the README there).

A finding is matched to the labeled site whose line span holds it (the narrowest one). Precision: findings
at `breaker` sites over all findings at labeled sites (findings at no labeled site are listed as
unlabeled). Recall: `breaker` sites with a finding over all `breaker` sites; weighted recall (`weights`)
counts each sampled site as the `pool / sampled` sites of the stratum it was drawn from (`pools.jsonl`). The
`before` rows are computed from the findings recorded with the labels, before the rules changed, for every
batch and half whose labels hold all of that time's findings.
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

from radixgate.bench import lint_realworld_batch, lint_realworld_strata
from radixgate.bench.lint_realworld_pool import sites_of
from radixgate.bench.lint_realworld_sites import attach_refs
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
    weighted_breakers: float = 0.0
    weighted_caught: float = 0.0
    pool_recall: float = float("nan")  # weighted recall with only the sampled sites the pool script enumerates

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")

    @property
    def recall(self) -> float:
        return self.caught / self.breakers if self.breakers else float("nan")

    @property
    def weighted_recall(self) -> float:
        """Recall with each sampled unflagged site weighted by pool / sample (its sampling fraction's inverse)."""
        return self.weighted_caught / self.weighted_breakers if self.weighted_breakers else float("nan")


def weights(
    labels: list[dict],
    pools: list[dict] | None = None,
    split: dict[str, str] | None = None,
    in_pool: set[int] | None = None,
) -> dict[int, float]:
    """A label's weight for recall: a sampled site stands for `pool / sampled` sites of the stratum it was drawn
    from, `sampled` being the labels of that stratum here, every other label (a census of findings) for one.
    A stratum is a row of `pools.jsonl` (batch, half, the label fields that mark its sample, or its listed
    `members`); a site label of no row that records its own `pool` (batch 3) is weighed the same way.
    With `in_pool` (ids of the labels at a site the pool script enumerates), a sampled label outside it weighs
    0 and `sampled` counts only those inside: recall over the pool's own sites, as batch 3 samples them."""
    pools, split = pools or [], split or {}
    members = [{tuple(m) for m in row.get("members", [])} for row in pools]

    def stratum(lab: dict) -> tuple | None:
        for i, row in enumerate(pools):
            if row["batch"] == lab.get("batch", 1) and row["split"] == split.get(lab["repo"]):
                if lint_realworld_strata.in_keys(lab, row["keys"]) or any(
                    (k, v) in members[i] for k, v in lab.items() if isinstance(v, int)
                ):
                    return ("row", i, row["pool"])
        if lab.get("kind") == "site" and "pool" in lab:
            return ("label", lab.get("batch"), lab["pool"])
        return None

    of = {id(lab): stratum(lab) for lab in labels}
    dropped = {i for i, key in of.items() if key is not None and in_pool is not None and i not in in_pool}
    of = {i: (None if i in dropped else key) for i, key in of.items()}
    sampled: dict[tuple, int] = defaultdict(int)
    for key in of.values():
        if key is not None:
            sampled[key] += 1
    weight = {i: key[2] / sampled[key] if key is not None else 1.0 for i, key in of.items()}
    return weight | {i: 0.0 for i in dropped}


def pool_labels(sources: Path, labels: list[dict]) -> set[int]:
    """Ids of the site labels whose first line starts a site of `lint_realworld_pool` in their file."""
    starts: dict[tuple[str, str], set[int]] = {}
    for lab in labels:
        key = (lab["repo"], lab["path"])
        if lab.get("kind") == "site" and key not in starts:
            try:
                source = (sources / folder(lab["repo"]) / lab["path"]).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                source = ""
            starts[key] = {site.line for site in sites_of(lab["path"], source)}
    return {
        id(lab) for lab in labels if lab.get("kind") == "site" and lab["line"] in starts[(lab["repo"], lab["path"])]
    }


def read_pools(data: Path = DATA) -> list[dict]:
    """The strata of `pools.jsonl` (written by `lint_realworld_strata`)."""
    return read_jsonl(data / "pools.jsonl")


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
            if v.code == "E999":  # a file that does not parse: not a prompt finding
                continue
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


def referring(finding: dict, labels: list[dict]) -> list[dict]:
    """Labels whose site uses the template text that holds `finding` (their `refs`)."""
    return [
        lab
        for lab in labels
        if lab["repo"] == finding["repo"]
        and any(p == finding["path"] and a <= finding["line"] <= b for p, a, b in lab.get("refs", []))
    ]


def score(
    name: str,
    repos: list[str],
    files: int,
    findings: list[dict],
    labels: list[dict],
    weight: dict[int, float] | None = None,
) -> tuple[Row, list]:
    """A finding counts once for precision: by the narrowest label whose span holds it, else by the labels
    whose sites use the template holding it (right if any of them is a breaker). A breaker site is caught
    by a finding in its span or in the template text it uses."""
    by_file: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for lab in labels:
        by_file[(lab["repo"], lab["path"])].append(lab)
    tp = fp = 0
    unlabeled = []
    hit: set[int] = set()
    for f in findings:
        users = [lab for lab in referring(f, labels) if lab["verdict"] != "unclear"]
        hit.update(id(lab) for lab in users)
        hit.update(id(lab) for lab in by_file[(f["repo"], f["path"])] if lab["line"] <= f["line"] <= lab["end_line"])
        lab = match(f, by_file)
        if lab is not None and lab["verdict"] != "unclear":
            hit.add(id(lab))
            verdicts = [lab["verdict"]]
        else:
            verdicts = [u["verdict"] for u in users]
        if not verdicts:
            unlabeled.append(f)
        elif "breaker" in verdicts:
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
    weight = weights(labels) if weight is None else weight
    w_all = sum(weight.get(id(lab), 1.0) for lab in breakers)
    w_hit = sum(weight.get(id(lab), 1.0) for lab in breakers if id(lab) in hit)
    row = Row(name, len(repos), files, len(findings), tp, fp, len(unlabeled), len(breakers), caught, w_all, w_hit)
    return row, unlabeled


def before_findings(labels: list[dict]) -> list[dict]:
    return [
        {"repo": lab["repo"], "path": lab["path"], "line": lab["line"], "code": code}
        for lab in labels
        for code in lab.get("before", [])
    ]


def table(rows: list[Row]) -> str:
    head = f"{'half':<20}{'repos':>6}{'files':>7}{'findings':>9}{'TP':>5}{'FP':>5}{'unlab.':>7}"
    head += f"{'precision':>10}{'breakers':>9}{'caught':>7}{'recall':>8}{'w.recall':>9}{'w.pool':>8}"
    out = [head]
    for r in rows:
        out.append(
            f"{r.name:<20}{r.repos:>6}{r.files:>7}{r.findings:>9}{r.tp:>5}{r.fp:>5}{r.unlabeled:>7}"
            f"{r.precision:>10.2f}{r.breakers:>9}{r.caught:>7}{r.recall:>8.2f}{r.weighted_recall:>9.2f}"
            f"{r.pool_recall:>8.2f}"
        )
    return "\n".join(out) + "\n"


def rule_table(halves: list[tuple[str, list[dict], list[dict], list[str]]]) -> str:
    """Precision per rule: for each half, the findings of each code scored alone."""
    out = [f"{'half':<20}{'rule':<7}{'findings':>9}{'TP':>5}{'FP':>5}{'unlab.':>7}{'precision':>10}"]
    for name, findings, labels, repos in halves:
        for code in sorted({f["code"] for f in findings}):
            mine = [f for f in findings if f["code"] == code]
            row, _ = score(name, repos, 0, mine, labels)
            out.append(
                f"{name:<20}{code:<7}{row.findings:>9}{row.tp:>5}{row.fp:>5}{row.unlabeled:>7}{row.precision:>10.2f}"
            )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixgate bench lint-realworld", description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, default=os.environ.get("RADIXGATE_REALWORLD_SOURCES"))
    parser.add_argument("--extract", type=Path, metavar="MIRROR", help="first write the sources from git mirrors")
    parser.add_argument("--data", type=Path, default=DATA, help="provenance and labels folder")
    parser.add_argument("--verbose", "-v", action="store_true", help="list findings and missed breakers")
    parser.add_argument(
        "--half", choices=("both", "dev", "test"), default="both", help="lint one half only (develop on dev)"
    )
    parser.add_argument(
        "--batch", type=int, action="append", help="only this batch (repeatable; batch 3 alone needs only its sources)"
    )
    parser.add_argument("--rules", action="store_true", help="precision per rule (always printed now)")
    parser.add_argument("--rules-at", metavar="COMMIT", help="lint with the rules of COMMIT instead of today's")
    parser.add_argument("--now-name", default="now", help="name of the rows linted with the current rules")
    args = parser.parse_args(argv)
    if args.rules_at:
        given = list(sys.argv[1:] if argv is None else argv)
        rest = [a for i, a in enumerate(given) if a != "--rules-at" and (i == 0 or given[i - 1] != "--rules-at")]
        rest = [a for a in rest if not a.startswith("--rules-at=")]
        return lint_realworld_strata.bench_at(args.rules_at, [*rest, "--now-name", args.rules_at])
    if args.sources is None:
        print("error: pass --sources DIR (or set RADIXGATE_REALWORLD_SOURCES)", file=sys.stderr)
        return 2
    provenance = read_jsonl(args.data / "provenance.jsonl")
    whole = lint_realworld_batch.read_list(args.data / "batch3.jsonl")  # whole repositories, one row each
    if args.batch:
        provenance = [row for row in provenance if row.get("batch", 1) in args.batch]
        whole = [row for row in whole if row["batch"] in args.batch]
    if args.extract:
        written = extract(args.extract, args.sources, provenance)
        written += lint_realworld_batch.extract(args.extract, args.sources, whole)
        print(f"extracted {written} files", file=sys.stderr)
    if not args.sources.is_dir():
        print(
            f"error: sources folder {args.sources} not found (fetch the repositories, then --extract)", file=sys.stderr
        )
        return 2
    split = {row["repo"]: row["split"] for row in provenance + whole}
    batch_of = {row["repo"]: row.get("batch", 1) for row in provenance + whole}
    batches = sorted(set(batch_of.values()))
    labels = {"test": read_jsonl(args.data / "labels_test.jsonl"), "dev": read_jsonl(args.data / "labels_dev.jsonl")}
    after_labels = read_jsonl(args.data / "labels_test_after.jsonl")
    attach_refs(args.sources, labels["test"] + after_labels + labels["dev"])
    everything, pools = labels["test"] + labels["dev"], read_pools(args.data)
    weight = weights(everything, pools, split)
    weight_pool = weights(everything, pools, split, pool_labels(args.sources, everything))
    halves = [h for h in ("test", "dev") if args.half in ("both", h)]
    started = time.perf_counter()
    found: dict[str, list[dict]] = {}
    lines = 0
    for half in halves:
        found[half], n = lint_repos(args.sources, sorted(r for r, s in split.items() if s == half), Settings())
        lines += n
    elapsed = time.perf_counter() - started
    rows: list[Row] = []
    per_rule: list[tuple[str, list[dict], list[dict], list[str]]] = []
    unlabeled: dict[str, list[dict]] = {}
    groups = [(f"b{b}", {b}) for b in batches] + ([("all", set(batches))] if len(batches) > 1 else [])
    for tag, members in groups:
        for half in halves:
            repos = sorted(r for r, s in split.items() if s == half and batch_of[r] in members)
            n_files = sum(1 for row in provenance if row["split"] == half and row.get("batch", 1) in members)
            n_files += sum(row["files"] for row in whole if row["split"] == half and row["batch"] in members)
            mine = [lab for lab in labels[half] if lab["repo"] in repos]
            now = mine + [dict(lab, recall=False) for lab in after_labels if lab["repo"] in repos and half == "test"]
            runs = [(args.now_name, [f for f in found[half] if f["repo"] in repos], now)]
            # "before": the findings recorded with the labels, where the labels hold every finding of that time
            censused = {lab.get("batch", 1) for lab in mine if lab.get("kind") == "finding"}
            if censused and censused >= {batch_of[r] for r in repos}:
                runs.insert(0, ("before", before_findings(mine), mine))
            for when, findings, labs in runs:
                row, missed = score(f"{tag} {half}, {when}", repos, n_files, findings, labs, weight)
                pool_row, _ = score(row.name, repos, n_files, findings, labs, weight_pool)
                rows.append(row._replace(pool_recall=pool_row.weighted_recall))
                per_rule.append((row.name, findings, labs, repos))
                if when != "before":
                    unlabeled[half] = missed
    sys.stdout.write(table(rows))
    sys.stdout.write(rule_table(per_rule))
    print(f"({lines:,} lines linted in {elapsed:.1f} s; precision counts labeled findings only)")
    if args.verbose:
        for half in halves:
            for f in unlabeled.get(half, []):
                print(f"  unlabeled {half}: {f['repo']} {f['path']}:{f['line']} {f['code']} {f.get('message', '')}")
            for lab in labels[half]:
                spans = [(lab["path"], lab["line"], lab["end_line"]), *lab.get("refs", [])]
                if lab["verdict"] == "breaker" and not any(
                    f["repo"] == lab["repo"] and p == f["path"] and a <= f["line"] <= b
                    for f in found[half]
                    for p, a, b in spans
                ):
                    print(f"  missed: {lab['repo']} {lab['path']}:{lab['line']} {lab['reason']}")
        for f in [f for half in halves for f in found[half]]:
            print(f"  finding: {f['repo']} {f['path']}:{f['line']} {f['code']} {f['message']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
