"""pytest's time for the tests that existed at a start commit, from the log of a `make test` run.

    PYTEST_ADDOPTS="--durations=0 --durations-min=0" make test 2>&1 | tee test.log
    python scripts/suite_time.py test.log --start 9009edc [--collect-start | --start-ids FILE]

Reads every `--durations` line of the log (both pytest runs of `make test`: setup, call and
teardown per test), sums them per test, and splits the tests into those that existed at `--start`
and those added since, printing each group's count and total seconds, and each pytest run's own
`in N s` figure. A test file renamed since the start (`git diff -M --name-status START HEAD --
tests/`) is looked up under its old path.

Whether a test existed: with `--start-ids FILE` (one node id per line, what
`pytest --collect-only -q` printed at the start commit) or `--collect-start` (which collects that
list itself, in a temporary git worktree of the start commit whose packages are imported through
a folder of links made from the start's `package-dir`), by exact node id, parameters included;
otherwise by the test function (class and name, parameters ignored) in the start's file, read
with `ast` from `git show START:path`. `--durations-min=0` matters: pytest hides phases under
5 ms without it, and a test with every phase hidden is missing from the counts.
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")
# pytest's closing line, "=== 12 passed, 1 skipped in 3.40s ===" (without the rules under -q)
SESSION = re.compile(
    r"^=*\s*\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)\b.* in (\d+(?:\.\d+)?)s\b"
)


def durations(lines: Iterable[str]) -> tuple[dict[str, float], list[float]]:
    """Seconds per node id (setup + call + teardown, over every run in the log), and each run's total."""
    per_test: dict[str, float] = collections.defaultdict(float)
    sessions = []
    for line in lines:
        if match := DURATION.match(line):
            per_test[match.group(3)] += float(match.group(1))
        elif match := SESSION.match(line):
            sessions.append(float(match.group(1)))
    return dict(per_test), sessions


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def renames(repo: str, start: str, head: str) -> tuple[dict[str, str], set[str]]:
    """(new path -> path at start) for renamed test files, and the files added since."""
    moved, added = {}, set()
    for line in git(repo, "diff", "-M", "--name-status", start, head, "--", "tests/").splitlines():
        status, *paths = line.split("\t")
        if status.startswith("R"):
            moved[paths[1]] = paths[0]
        elif status.startswith(("A", "C")):
            added.add(paths[-1])
    return moved, added


def test_functions(source: str) -> set[str]:
    """``name`` and ``Class::name`` of the test functions pytest collects from `source`."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test"):
                    names.add(f"{node.name}::{item.name}")
    return names


@dataclass
class StartTests:
    """Answers whether a node id (path as at the start) existed at the start commit."""

    repo: str
    start: str
    ids: set[str] | None = None
    _files: dict[str, set[str] | None] = field(default_factory=dict)

    def __contains__(self, nodeid: str) -> bool:
        if self.ids is not None:
            return nodeid in self.ids
        path, _, rest = nodeid.partition("::")
        if path not in self._files:
            try:
                self._files[path] = test_functions(git(self.repo, "show", f"{self.start}:{path}"))
            except (subprocess.CalledProcessError, SyntaxError):
                self._files[path] = None
        functions = self._files[path]
        return functions is not None and re.sub(r"\[.*\]$", "", rest) in functions


def collect_start(repo: str, start: str) -> set[str]:
    """The node ids `pytest --collect-only -q` lists at `start`, in a temporary worktree."""
    with tempfile.TemporaryDirectory(prefix="suite-time-") as tmp:
        tree, links = os.path.join(tmp, "tree"), os.path.join(tmp, "links")
        git(repo, "worktree", "add", "--detach", tree, start)
        try:
            with open(os.path.join(tree, "pyproject.toml"), "rb") as f:
                package_dir = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
            os.makedirs(links)
            for name, folder in sorted(package_dir.items(), key=lambda kv: kv[0].count(".")):
                parent, _, leaf = name.rpartition(".")
                where = os.path.join(tree, package_dir[parent], leaf) if parent else os.path.join(links, leaf)
                if not os.path.exists(where):
                    os.symlink(os.path.join(tree, folder), where)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([links, os.environ.get("PYTHONPATH", "")])}
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests"],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            ids = {line.strip() for line in run.stdout.splitlines() if "::" in line}
            if run.returncode != 0 or not ids:
                raise SystemExit(f"collecting at {start} failed:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
            return ids
        finally:
            git(repo, "worktree", "remove", "--force", tree)


def added_tests(
    per_test: dict[str, float], start_tests: StartTests, moved: dict[str, str], added: set[str]
) -> list[str]:
    """The node ids in the log that did not exist at the start (a renamed file under its old path)."""
    new = []
    for nodeid in per_test:
        if nodeid.partition("::")[0] in added or start_form(nodeid, moved) not in start_tests:
            new.append(nodeid)
    return new


def start_form(nodeid: str, moved: dict[str, str]) -> str:
    path, sep, rest = nodeid.partition("::")
    return f"{moved.get(path, path)}{sep}{rest}"


def missing_tests(per_test: dict[str, float], start_ids: set[str], moved: dict[str, str]) -> list[str]:
    """The start's node ids with no line in the log."""
    present = {start_form(nodeid, moved) for nodeid in per_test}
    return sorted(start_ids - present)


def report(
    per_test: dict[str, float], sessions: list[float], start_tests: StartTests, moved: dict[str, str], added: set[str]
) -> list[str]:
    new_ids = added_tests(per_test, start_tests, moved, added)
    existed = [seconds for nodeid, seconds in per_test.items() if nodeid not in new_ids]
    new = [per_test[nodeid] for nodeid in new_ids]
    lines = [
        f"existed at {start_tests.start}: {len(existed)} tests, {sum(existed):.1f} s (setup + call + teardown)",
        f"added since: {len(new)} tests, {sum(new):.1f} s",
        f"all in the log: {len(per_test)} tests, {sum(per_test.values()):.1f} s",
    ]
    if start_tests.ids is not None:
        missing = missing_tests(per_test, start_tests.ids, moved)
        lines.append(
            f"tests collected at {start_tests.start}: {len(start_tests.ids)}, of which {len(missing)} are not in "
            "the log (renamed or removed since, deselected, or every phase hidden)"
        )
    if sessions:
        runs = " + ".join(f"{s:.1f}" for s in sessions)
        lines.append(
            f"pytest runs in the log: {len(sessions)} ({runs} s = {sum(sessions):.1f} s by pytest's own figure)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", help="output of `make test` with --durations=0 --durations-min=0")
    p.add_argument("--start", required=True, help="the start commit")
    p.add_argument("--head", default="HEAD", help="the commit the log ran (default: HEAD)")
    p.add_argument("--repo", default=".", help="the git repository (default: .)")
    ids = p.add_mutually_exclusive_group()
    ids.add_argument("--start-ids", metavar="FILE", help="node ids collected at the start, one a line")
    ids.add_argument("--collect-start", action="store_true", help="collect the start's node ids in a worktree")
    p.add_argument("--show-added", action="store_true", help="also list the tests counted as added since the start")
    p.add_argument("--show-missing", action="store_true", help="with the start's ids: list those not in the log")
    args = p.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as f:
        per_test, sessions = durations(f)
    if not per_test:
        p.error(f"{args.log} has no --durations lines: run pytest with --durations=0 --durations-min=0")
    start_ids = None
    if args.start_ids:
        with open(args.start_ids, encoding="utf-8") as f:
            start_ids = {line.strip() for line in f if "::" in line}
    elif args.collect_start:
        start_ids = collect_start(args.repo, args.start)
    moved, added = renames(args.repo, args.start, args.head)
    start_tests = StartTests(args.repo, args.start, start_ids)
    print("\n".join(report(per_test, sessions, start_tests, moved, added)))
    if args.show_added:
        print("\n".join(f"added: {nodeid}" for nodeid in added_tests(per_test, start_tests, moved, added)))
    if args.show_missing and start_ids is not None:
        print("\n".join(f"missing: {nodeid}" for nodeid in missing_tests(per_test, start_ids, moved)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
