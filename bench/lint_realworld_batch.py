"""Batch 3 of promptlint's real-world evaluation: whole repositories, listed in `batch3.jsonl`.

    python -m radixgate.bench.lint_realworld_batch --list MIRROR REPO...   # write the list (once)
    python -m radixgate.bench.lint_realworld_batch --extract MIRROR --sources DIR

Each row of `tests/linter/realworld/batch3.jsonl` names a repository, the commit read, its licence, its half
and how many files and lines it has. Every `.py` file of the repository at that commit is part of it (no
per-repository cap, no keyword filter) except tests (`test/`, `tests/`, `testing/`, `test_*.py`, `*_test.py`)
and `setup.py`. Repositories are split within the batch by `sha256(SEED + repo)`: the lower half of the sorted
hashes is `dev`, the upper half `test`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "linter" / "realworld"
LIST = DATA / "batch3.jsonl"
SEED = "promptlint-rw-3:"
_SKIP = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_test\.py$|(^|/)setup\.py$")
_LICENCES = [
    ("GNU AFFERO GENERAL PUBLIC LICENSE", "AGPL-3.0"),
    ("GNU LESSER GENERAL PUBLIC LICENSE", "LGPL"),
    ("GNU GENERAL PUBLIC LICENSE", "GPL-3.0"),
    ("Apache License", "Apache-2.0"),
    ("Permission is hereby granted, free of charge", "MIT"),
    ("Redistribution and use in source and binary forms", "BSD"),
    ("Creative Commons", "CC"),
]


def git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, check=True).stdout


def files_of(git_dir: Path, commit: str) -> list[str]:
    names = git(git_dir, "ls-tree", "-r", "--name-only", commit).decode().splitlines()
    return sorted(n for n in names if n.endswith(".py") and not _SKIP.search(n))


def licence_of(git_dir: Path, commit: str) -> str:
    names = git(git_dir, "ls-tree", "-r", "--name-only", commit).decode().splitlines()
    for name in sorted(names, key=lambda n: n.count("/")):
        if n_deep(name) <= 1 and name.rsplit("/", 1)[-1].lower().startswith(("license", "licence", "copying")):
            text = git(git_dir, "show", f"{commit}:{name}").decode(errors="replace")
            return next((spdx for key, spdx in _LICENCES if key.lower() in text.lower()), f"see {name}")
    return "none found"


def n_deep(name: str) -> int:
    return name.count("/")


def split_of(repos: list[str]) -> dict[str, str]:
    ranked = sorted(repos, key=lambda r: hashlib.sha256((SEED + r).encode()).hexdigest())
    half = len(ranked) // 2
    return {r: ("dev" if i < half else "test") for i, r in enumerate(ranked)}


def make_list(mirror: Path, repos: list[str]) -> list[dict]:
    halves = split_of(repos)
    rows = []
    for repo in sorted(repos):
        git_dir = mirror / repo.replace("/", "+", 1) / "repo"
        commit = git(git_dir, "rev-parse", "HEAD").decode().strip()
        paths = files_of(git_dir, commit)
        lines = sum(git(git_dir, "show", f"{commit}:{p}").count(b"\n") for p in paths)
        rows.append(
            {
                "repo": repo,
                "commit": commit,
                "licence": licence_of(git_dir, commit),
                "split": halves[repo],
                "files": len(paths),
                "lines": lines,
                "batch": 3,
            }
        )
    return rows


def read_list(path: Path = LIST) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def extract(mirror: Path, sources: Path, rows: list[dict]) -> int:
    """Write every file of each listed repository at its commit under `sources/owner+name/`."""
    written = 0
    for row in rows:
        git_dir = mirror / row["repo"].replace("/", "+", 1) / "repo"
        if not git_dir.is_dir():
            print(f"warning: {row['repo']}: no mirror at {git_dir}", file=sys.stderr)
            continue
        for path in files_of(git_dir, row["commit"]):
            dest = sources / row["repo"].replace("/", "+", 1) / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(git(git_dir, "show", f"{row['commit']}:{path}"))
            written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixgate bench lint-realworld-batch", description=__doc__.splitlines()[0])
    parser.add_argument("--list", type=Path, metavar="MIRROR", help="write batch3.jsonl for REPO... from MIRROR")
    parser.add_argument("--extract", type=Path, metavar="MIRROR", help="write the sources from MIRROR")
    parser.add_argument("--sources", type=Path)
    parser.add_argument("repos", nargs="*")
    args = parser.parse_args(argv)
    if args.list:
        rows = make_list(args.list, args.repos)
        LIST.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"listed {len(rows)} repositories in {LIST}", file=sys.stderr)
    if args.extract:
        if args.sources is None:
            print("error: --extract needs --sources DIR", file=sys.stderr)
            return 2
        print(f"extracted {extract(args.extract, args.sources, read_list())} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
