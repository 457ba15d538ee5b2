"""`bench lint-realworld`'s matching of findings to hand labels (on a tiny repository written here)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from radixgate.bench.lint_realworld import score
from radixgate.bench.lint_realworld_sites import attach_refs

PROMPTS = '''\
REVIEW = """Review:
{diff}
Many fixed instructions follow here."""
'''
USE = """\
from app.prompts import REVIEW


def review(client, diff):
    prompt = REVIEW.format(diff=diff)
    return client.create(messages=[{"role": "user", "content": prompt}])
"""


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "src" / "owner+repo"
    (root / "app").mkdir(parents=True)
    (root / "app" / "prompts.py").write_text(PROMPTS)
    (root / "app" / "use.py").write_text(textwrap.dedent(USE))
    return tmp_path / "src"


def _label(path: str, line: int, end: int, verdict: str) -> dict:
    return {"repo": "owner/repo", "path": path, "line": line, "end_line": end, "kind": "site", "verdict": verdict}


def test_a_site_covers_the_template_it_formats_through_a_local(tmp_path):
    sources = _repo(tmp_path)
    call = _label("app/use.py", 6, 6, "breaker")  # the LLM call: `prompt` -> `REVIEW.format` -> REVIEW
    attach_refs(sources, [call])
    assert ("app/prompts.py", 1, 3) in call["refs"]
    # A finding at the template's placeholder catches the site and counts as right.
    row, unlabeled = score(
        "t", ["owner/repo"], 2, [{"repo": "owner/repo", "path": "app/prompts.py", "line": 2}], [call]
    )
    assert (row.tp, row.fp, row.caught, row.breakers, unlabeled) == (1, 0, 1, 1, [])


def test_a_finding_counts_once_and_by_the_narrowest_label_holding_it(tmp_path):
    sources = _repo(tmp_path)
    template = _label("app/prompts.py", 1, 3, "breaker")
    line = _label("app/prompts.py", 2, 2, "ok")
    attach_refs(sources, [template, line])
    row, _ = score(
        "t", ["owner/repo"], 2, [{"repo": "owner/repo", "path": "app/prompts.py", "line": 2}], [template, line]
    )
    # Precision by the narrowest label (ok: a false positive); recall: the breaker holding it is caught.
    assert (row.tp, row.fp, row.caught) == (0, 1, 1)


def test_an_unrelated_finding_is_unlabeled(tmp_path):
    sources = _repo(tmp_path)
    call = _label("app/use.py", 6, 6, "breaker")
    attach_refs(sources, [call])
    row, unlabeled = score("t", ["owner/repo"], 2, [{"repo": "owner/repo", "path": "app/use.py", "line": 1}], [call])
    assert (row.tp, row.fp, row.caught, len(unlabeled)) == (0, 0, 0, 1)
