"""The size of each unflagged-site pool the real-world labels were sampled from (`pools.jsonl`).

    python -m radixgate.bench.lint_realworld_strata --sources DIR [--write]

Recall is weighted by the sampling fraction (`lint_realworld.weights`): a sampled site stands for
`pool / sampled` sites. `pool` is counted here, for each sample of `STRATA`, over the sites that
`lint_realworld_pool` enumerates (independently of promptlint) in that batch and half, split into flagged and
unflagged by the findings of promptlint *at the commit whose rules were in force when the sample was drawn*:
that commit's `linter/` is exported with `git archive` into a temporary folder and run in a subprocess in
place of today's (`--lint-with`). A site is flagged when a finding lies in its span or in the template text it
uses (`lint_realworld_sites`), as when the samples were drawn. Without `--write` the rows are printed only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from radixgate.bench.lint_realworld_pool import pool
from radixgate.bench.lint_realworld_sites import Repository, attach_refs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "linter" / "realworld"


class Stratum(NamedTuple):
    batch: int
    split: str
    keys: tuple[str, ...]  # a label belongs to the stratum when it has one of these fields ("kind:site": any site)
    rules: str  # the commit whose rules split flagged from unflagged when the sample was drawn
    drawn_from: str  # the stratum's sites: "unflagged" (no finding at `rules`) or "flagged"
    note: str
    members_key: str = ""  # labels with this field join the stratum when flagged (or not) as `drawn_from` says


STRATA = [
    Stratum(1, "test", ("kind:site",), "70e3a5e", "unflagged", "seeded random sample of unflagged sites"),
    # Batch 1 dev: a seed-1919 sample of every candidate, flagged or not (`sample`), then every candidate still
    # unlabelled that c92911e's rules left unflagged (`sample5b`): post-stratified by c92911e's split, the
    # unflagged stratum is covered by both samples, the flagged one by the seed-1919 sample alone.
    Stratum(1, "dev", ("sample5b",), "c92911e", "unflagged", "sample5b census + unflagged sample-1919 sites", "sample"),
    Stratum(1, "dev", (), "c92911e", "flagged", "flagged sites of the seed-1919 sample of every candidate", "sample"),
    Stratum(2, "dev", ("sample6",), "53a4cd7", "unflagged", "first 160 unflagged of a random.Random(6006) shuffle"),
    Stratum(2, "test", ("sample6",), "8cb9b94", "unflagged", "first 110 unflagged of a random.Random(6006) shuffle"),
    Stratum(3, "test", ("sample3",), "1702d83", "unflagged", "first 100 unflagged of a random.Random(3003) shuffle"),
]

# Loads `radixgate.linter` from the folder in argv[1] (that commit's rules) before anything imports today's.
_INSTALL = """
import importlib.util, sys
from pathlib import Path
import radixgate
linter = Path(sys.argv[1])
spec = importlib.util.spec_from_file_location(
    "radixgate.linter", linter / "__init__.py", submodule_search_locations=[str(linter)])
module = importlib.util.module_from_spec(spec)
sys.modules["radixgate.linter"] = module
spec.loader.exec_module(module)
"""
_FINDINGS = """
import json
from radixgate.linter.settings import Settings
sources, out = Path(sys.argv[2]), []
for folder in sys.argv[3:]:
    root = sources / folder
    if (linter / "runner.py").is_file():  # a project at a time, as lint_realworld did from then on
        from radixgate.linter.runner import lint_paths
        violations = lint_paths([str(root)], Settings()).violations
    else:  # before the project-wide analysis: one file at a time
        from radixgate.linter.cli import iter_files, lint_file
        files = iter_files([str(root)], Settings(), False)
        violations = [v for p in files for v in lint_file(p, Settings(), False, False)[0]]
    for v in violations:
        if v.code != "E999":
            path = Path(v.filename).resolve().relative_to(root.resolve()).as_posix()
            out.append({"folder": folder, "path": path, "line": v.row, "code": v.code})
print(json.dumps(out))
"""
_BENCH = """
from radixgate.bench.lint_realworld import main
sys.exit(main(sys.argv[2:]))
"""


def with_linter_at(commit: str, code: str, args: list[str], capture: bool = True) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter whose `radixgate.linter` is `linter/` at `commit` (exported with
    `git archive` into a temporary folder, removed afterwards); argv[1] is that folder, then `args`."""
    with tempfile.TemporaryDirectory(prefix=f"promptlint-{commit}-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "linter"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        command = [sys.executable, "-c", _INSTALL + code, str(Path(tmp) / "linter"), *args]
        return subprocess.run(command, capture_output=capture, text=True, check=capture)


def findings_at(commit: str, sources: Path, folders: list[str]) -> list[dict]:
    """promptlint's findings over `folders` (one project each) with the rules of `commit`."""
    return json.loads(with_linter_at(commit, _FINDINGS, [str(sources), *folders]).stdout)


def bench_at(commit: str, args: list[str]) -> int:
    """`lint_realworld.main(args)` with the rules of `commit` (one that has `linter/runner.py`)."""
    return with_linter_at(commit, _BENCH, args, capture=False).returncode


def _flagged(folder: str, spans: list[tuple[str, int, int]], lines: dict[tuple[str, str], list[int]]) -> bool:
    return any(a <= n <= b for p, a, b in spans for n in lines.get((folder, p), []))


def count(stratum: Stratum, sources: Path, repos: list[str], labels: list[dict]) -> dict:
    """The stratum's pool (sites of its batch and half, flagged or not at its rules as `drawn_from` says) and
    its members among `labels` (with `refs` attached)."""
    folders = [r.replace("/", "+", 1) for r in repos]
    lines: dict[tuple[str, str], list[int]] = {}
    for f in findings_at(stratum.rules, sources, folders):
        lines.setdefault((f["folder"], f["path"]), []).append(f["line"])
    want_flagged = stratum.drawn_from == "flagged"
    sites = in_pool = 0
    for folder in folders:
        repo = Repository(sources / folder)
        for site in pool(sources / folder):
            sites += 1
            spans = [(site.path, site.line, site.end_line), *repo.refs(site.path, site.line, site.end_line)]
            in_pool += _flagged(folder, spans, lines) == want_flagged
    members = []
    if stratum.members_key:
        for lab in labels:
            if stratum.members_key in lab and lab["repo"] in repos:
                spans = [(lab["path"], lab["line"], lab["end_line"]), *lab.get("refs", [])]
                if _flagged(lab["repo"].replace("/", "+", 1), spans, lines) == want_flagged:
                    members.append([stratum.members_key, lab[stratum.members_key]])
    n_findings = sum(len(v) for v in lines.values())
    return {"pool": in_pool, "sites": sites, "findings_at_rules": n_findings, "members": sorted(members)}


def rows(sources: Path, data: Path = DATA) -> list[dict]:
    def read(name: str) -> list[dict]:
        return [json.loads(x) for x in (data / name).read_text().splitlines() if x.strip()]

    provenance, whole = read("provenance.jsonl"), read("batch3.jsonl")
    labels = {"test": read("labels_test.jsonl"), "dev": read("labels_dev.jsonl")}
    attach_refs(sources, labels["test"] + labels["dev"])
    out = []
    for s in STRATA:
        repos = sorted(
            {r["repo"] for r in provenance + whole if r.get("batch", 1) == s.batch and r["split"] == s.split}
        )
        mine = [lab for lab in labels[s.split] if lab.get("batch", 1) == s.batch]
        counted = count(s, sources, repos, mine)
        keyed = sum(1 for lab in mine if in_keys(lab, s.keys))
        row = {"batch": s.batch, "split": s.split, "keys": list(s.keys), **counted}
        row["sampled"] = keyed + len(row["members"])
        row.update(rules=s.rules, drawn_from=s.drawn_from, repos=len(repos), note=s.note)
        if not row["members"]:
            del row["members"]
        out.append(row)
    return out


def in_keys(lab: dict, keys: tuple[str, ...] | list[str]) -> bool:
    return any(lab.get("kind") == "site" if k == "kind:site" else k in lab for k in keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m radixgate.bench.lint_realworld_strata", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--sources", type=Path, required=True, help="every batch's sources (lint_realworld --extract)")
    parser.add_argument("--write", action="store_true", help="write pools.jsonl next to the labels")
    args = parser.parse_args(argv)
    found = rows(args.sources)
    text = "".join(json.dumps(r) + "\n" for r in found)
    if args.write:
        (DATA / "pools.jsonl").write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
