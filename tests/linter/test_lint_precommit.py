"""A real pre-commit run: `pre-commit try-repo` against this repository, wired as the git
pre-commit hook of a scratch repository, blocks a commit that adds a KV101 and lets a clean one
through. pre-commit builds the hook's virtualenv from this repository with the package index off:
base dependencies and the build backend come from the wheelhouse `make install` builds (`pip wheel`),
so the run is the same offline. `--ref HEAD`: the committed hook, not a shadow copy of whatever the
working tree holds at the moment."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tooling import missing

ROOT = Path(__file__).resolve().parents[2]
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
WHEELHOUSE = ROOT / ".wheelhouse"  # `make install`: the hook's base dependencies and setuptools
NOWHERE = "http://127.0.0.1:9"  # a proxy that refuses: any use of the network fails the run

pytestmark = pytest.mark.slow  # a real pre-commit run

CLEAN = """def build(question):
    return [{"role": "system", "content": "You are a meticulous support assistant. Answer in three sentences and cite the policy section."},
            {"role": "user", "content": question}]
"""
KV101 = """from datetime import datetime


def build(question):
    return [{"role": "system", "content": f"Now: {datetime.now()}. You are a meticulous support assistant. Answer in three sentences and cite the policy. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket. Keep every reply polite and never share internal notes."},
            {"role": "user", "content": question}]
"""


def _git(repo: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=240)


def test_pre_commit_blocks_kv101_and_passes_clean_code(tmp_path):
    if not PRE_COMMIT.exists():
        missing("pre-commit", "make install")
    if shutil.which("git") is None:
        missing("git", "apt-get install git")
    if not any(WHEELHOUSE.glob("setuptools-*.whl")):
        missing("the hook's wheelhouse (.wheelhouse)", "make install")
    repo = tmp_path / "app"
    repo.mkdir()
    env = {
        **os.environ,
        "PIP_NO_INDEX": "1",  # the package index is never asked
        "PIP_FIND_LINKS": str(WHEELHOUSE),
        "HTTP_PROXY": NOWHERE,
        "HTTPS_PROXY": NOWHERE,
        "PRE_COMMIT_HOME": str(tmp_path / "cache"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    assert _git(repo, "init", "-q", env=env).returncode == 0
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\nexec '{PRE_COMMIT}' try-repo '{ROOT}' promptlint --ref HEAD\n")
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)

    (repo / "clean.py").write_text(CLEAN)
    _git(repo, "add", "clean.py", env=env)
    done = _git(repo, "commit", "-q", "-m", "clean", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "promptlint" in done.stdout + done.stderr and "Passed" in done.stdout + done.stderr

    (repo / "bad.py").write_text(KV101)
    _git(repo, "add", "bad.py", env=env)
    done = _git(repo, "commit", "-q", "-m", "bad", env=env)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Failed" in output and "bad.py:5:51: KV101" in output
    assert _git(repo, "log", "--oneline", env=env).stdout.count("\n") == 1  # only the clean one
