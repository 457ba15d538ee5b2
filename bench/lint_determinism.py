"""promptlint's determinism on real trees: the same findings for every file in any file order, as a folder
or as explicit files, alone or with an unrelated project beside it.

    python -m radixgate.bench.lint_determinism .realworld/src/SakanaAI+AI-Scientist
    python -m radixgate.bench.lint_determinism REPO --neighbour OTHER_REPO --orders 3

Each repository is copied into a temporary folder with a `pyproject.toml` at its top (so that it is one
project whichever way its files are given), then linted: as a folder (the reference); as explicit files
(pre-commit's way) in `--orders` seeded random orders; and beside `--neighbour` (another project), as two
folders in both orders and as the two projects' files shuffled together. Every run must give each file of
the repository the same findings as the reference. Prints one line per run and exits 1 on any difference.
The sources of batch 3 are rebuilt by `python -m radixgate.bench.lint_realworld_batch --extract ...`.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from radixgate.linter.runner import lint_paths
from radixgate.linter.settings import Settings

Findings = dict[str, list[tuple[int, int, str, str]]]


def copy_project(source: Path, into: Path) -> Path:
    """`source`'s Python files copied under `into/<name>`, with a `pyproject.toml` marking the project."""
    target = into / source.name
    for path in sorted(source.rglob("*.py")):
        rel = path.relative_to(source)
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / rel)
    (target / "pyproject.toml").write_text(f'[project]\nname = "{source.name}"\n')
    return target


def findings(paths: list[Path], within: Path) -> Findings:
    """Each file under `within` (relative path) -> its findings, linting `paths` together."""
    result = lint_paths([str(p) for p in paths], Settings())
    top = within.resolve()
    out: Findings = {}
    for path in result.files:
        if path.resolve().is_relative_to(top):
            out.setdefault(path.resolve().relative_to(top).as_posix(), [])
    for v in result.violations:
        where = Path(v.filename).resolve()
        if where.is_relative_to(top):
            out.setdefault(where.relative_to(top).as_posix(), []).append((v.row, v.col, v.code, v.message))
    return {k: sorted(v) for k, v in sorted(out.items())}


def differences(reference: Findings, other: Findings) -> list[str]:
    """The files whose findings differ (or that only one run read)."""
    return sorted(k for k in reference.keys() | other.keys() if reference.get(k) != other.get(k))


def check(repo: Path, neighbour: Path | None, orders: int) -> bool:
    with tempfile.TemporaryDirectory(prefix="promptlint_determinism_") as tmp:
        project = copy_project(repo, Path(tmp))
        other = copy_project(neighbour, Path(tmp)) if neighbour is not None else None
        files = sorted(project.rglob("*.py"))
        start = time.perf_counter()
        reference = findings([project], project)
        count = sum(len(v) for v in reference.values())
        print(f"{repo.name}: {len(files)} files, {count} findings as a folder ({time.perf_counter() - start:.1f} s)")
        runs: list[tuple[str, list[Path]]] = []
        for seed in range(1, orders + 1):
            shuffled = list(files)
            random.Random(seed).shuffle(shuffled)
            runs.append((f"explicit files, order {seed}", shuffled))
        if other is not None:
            runs.append((f"beside {neighbour.name}, after it", [other, project]))  # type: ignore[union-attr]
            runs.append((f"beside {neighbour.name}, before it", [project, other]))  # type: ignore[union-attr]
            mixed = files + sorted(other.rglob("*.py"))
            random.Random(orders + 1).shuffle(mixed)
            runs.append(("files of both shuffled together", mixed))
        same = True
        for label, paths in runs:
            start = time.perf_counter()
            got = findings(paths, project)
            diff = differences(reference, got)
            same &= not diff
            found = sum(len(v) for v in got.values())
            status = "identical" if not diff else f"{len(diff)} files differ: {', '.join(diff[:5])}"
            print(f"  {label}: {found} findings, {status} ({time.perf_counter() - start:.1f} s)")
        return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m radixgate.bench.lint_determinism", description=__doc__.splitlines()[0]
    )
    parser.add_argument("repos", nargs="+", type=Path, help="source folders of repositories (one project each)")
    parser.add_argument("--neighbour", type=Path, help="an unrelated project linted beside each repository")
    parser.add_argument("--orders", type=int, default=3, help="random orders of the explicit files")
    args = parser.parse_args(argv)
    for path in [*args.repos, *([args.neighbour] if args.neighbour else [])]:
        if not path.is_dir():
            print(
                f"error: {path}: not a folder (rebuild the sources with lint_realworld_batch --extract)",
                file=sys.stderr,
            )
            return 2
    ok = all([check(repo, args.neighbour, args.orders) for repo in args.repos])
    print("same findings in every run" if ok else "FINDINGS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
