"""scripts/suite_time.py: the durations of a small log split by whether each test existed at a start
commit of a real git repository, a renamed test file followed to its old path."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tooling import missing

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "suite_time.py"

OLD = """import pytest

def test_a(): pass

@pytest.mark.parametrize("x", [1, 2])
def test_b(x): pass

class TestK:
    def test_m(self): pass
"""

LOG = """============================= slowest durations ==============================
1.50s call     tests/test_moved.py::test_a
0.25s setup    tests/test_moved.py::test_a
0.25s teardown tests/test_moved.py::test_a
2.00s call     tests/test_moved.py::test_b[1]
0.50s call     tests/test_moved.py::test_b[3]
1.00s call     tests/test_moved.py::TestK::test_m
4.00s call     tests/test_moved.py::test_c
8.00s call     tests/test_new.py::test_n
======================== 6 passed in 20.00s =========================
12 passed, 1 skipped in 30.50s
"""


@pytest.fixture
def suite_time(monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("suite_time", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "suite_time", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose start commit has tests/test_old.py and tests/test_gone.py; since then
    test_old.py became test_moved.py (plus test_c), test_gone.py went and test_new.py came."""
    if shutil.which("git") is None:
        missing("git", "apt-get install git")
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)

    def git(*args: str) -> str:
        command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *args]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (repo / "tests" / "test_old.py").write_text(OLD)
    (repo / "tests" / "test_gone.py").write_text("def test_z(): pass\n")
    git("add", "tests")
    git("commit", "-q", "-m", "start")
    start = git("rev-parse", "HEAD")
    git("mv", "tests/test_old.py", "tests/test_moved.py")
    git("rm", "-q", "tests/test_gone.py")
    (repo / "tests" / "test_moved.py").write_text(OLD + "\ndef test_c(): pass\n")
    (repo / "tests" / "test_new.py").write_text("def test_n(): pass\n")
    git("add", "tests")
    git("commit", "-q", "-m", "since")
    return repo, start


def test_by_function_the_renamed_files_tests_count_as_existing(suite_time, tmp_path, capsys) -> None:
    repo, start = _repo(tmp_path)
    (tmp_path / "test.log").write_text(LOG)
    assert suite_time.main([str(tmp_path / "test.log"), "--start", start, "--repo", str(repo), "--show-added"]) == 0
    # existed: test_a 1.50 + 0.25 + 0.25 = 2.0, test_b[1] 2.0, test_b[3] 0.5 (test_b existed), TestK::test_m 1.0
    # = 4 tests, 5.5 s; added: test_c 4.0 and test_new.py's test_n 8.0 = 2 tests, 12.0 s.
    assert capsys.readouterr().out.splitlines() == [
        f"existed at {start}: 4 tests, 5.5 s (setup + call + teardown)",
        "added since: 2 tests, 12.0 s",
        "all in the log: 6 tests, 17.5 s",
        "pytest runs in the log: 2 (20.0 + 30.5 s = 50.5 s by pytest's own figure)",
        "added: tests/test_moved.py::test_c",
        "added: tests/test_new.py::test_n",
    ]


def test_by_collected_ids_parameters_count_and_missing_ones_are_listed(suite_time, tmp_path, capsys) -> None:
    repo, start = _repo(tmp_path)
    (tmp_path / "test.log").write_text(LOG)
    ids = ["test_a", "test_b[1]", "test_b[2]", "TestK::test_m"]
    collected = [f"tests/test_old.py::{name}" for name in ids] + ["tests/test_gone.py::test_z", "", "5 tests collected"]
    (tmp_path / "start_ids.txt").write_text("\n".join(collected))
    argv = [str(tmp_path / "test.log"), "--start", start, "--repo", str(repo), "--show-missing"]
    assert suite_time.main([*argv, "--start-ids", str(tmp_path / "start_ids.txt")]) == 0
    # existed: test_a 2.0, test_b[1] 2.0, TestK::test_m 1.0 = 3 tests, 5.0 s; added: test_b[3] 0.5, test_c 4.0,
    # test_n 8.0 = 3 tests, 12.5 s; not in the log: test_b[2] and the removed file's test_z.
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        f"existed at {start}: 3 tests, 5.0 s (setup + call + teardown)",
        "added since: 3 tests, 12.5 s",
        "all in the log: 6 tests, 17.5 s",
    ]
    assert out[3].startswith(f"tests collected at {start}: 5, of which 2 are not in the log")
    assert out[5:] == ["missing: tests/test_gone.py::test_z", "missing: tests/test_old.py::test_b[2]"]


def test_a_log_without_durations_is_refused(suite_time, tmp_path, capsys) -> None:
    (tmp_path / "test.log").write_text("12 passed in 3.00s\n")
    with pytest.raises(SystemExit) as exit_info:
        suite_time.main([str(tmp_path / "test.log"), "--start", "HEAD"])
    assert exit_info.value.code == 2 and "--durations=0 --durations-min=0" in capsys.readouterr().err
