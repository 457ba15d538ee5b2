"""The fast paths promptlint takes for speed give what the slow, obvious computations give: which names a
file calls, its import lines, its hot lines, a file's project root, a real tree's findings in any order."""

from __future__ import annotations

import random
import re
from pathlib import Path

from radixgate.bench import lint_determinism
from radixgate.linter.analysis.facts import PLAIN_NAME, called_names, called_suffixes, hot_lines
from radixgate.linter.runner import _IMPORT_LINE, _import_lines, _root_within, scan_imports

SOURCES = [
    "client.chat.completions.create(model='m', messages=msgs)\nask (q)\nfoo_bar(x)(y)\n",
    "import os, sys\nfrom .prompts import (\n    QA,\n    SUMMARY,\n)\nx = 'import me'  # import\n",
    "def f():\n    import json as j\n    return j.dumps(x)\n\tfrom a.b import c\r\nprint(importlib)\n",
    "éfoo(1)\n_x9(2)\nnot_called\n(3)\n",
]
_WORDS = ["import", "from", " ", "\n", "(", ")", "ask", "foo", "é", "x", ".", "prompt", "format", "\t", ","]


def _random_sources(n: int) -> list[str]:
    rng = random.Random(30)
    return SOURCES + ["".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 60))) for _ in range(n)]


def test_called_names_and_suffixes_match_the_plain_searches() -> None:
    called = re.compile(r"(\w+)\s*\(")
    for low in _random_sources(400):
        assert called_names(low) == set(called.findall(low)), low
        words = {w for run in re.findall(r"\w+", low) for i in range(len(run)) for w in (run[i:], run[: i + 1])}
        found = called_suffixes(low)
        for word in words | {"ask", "foo", "bar", "x"}:
            if PLAIN_NAME.fullmatch(word):
                assert (word in found) == (word + "(" in low), (word, low)


def test_import_lines_are_the_regex_matches_and_scan_reads_them() -> None:
    for source in _random_sources(400):
        assert [m.span() for m in _import_lines(source)] == [m.span() for m in _IMPORT_LINE.finditer(source)]
    assert scan_imports(SOURCES[1], "app.main") == ["os", "sys", "app.prompts.QA", "app.prompts.SUMMARY", "app.prompts"]


def test_hot_lines_extended_by_extra_words_equal_a_fresh_search() -> None:
    for low in _random_sources(300):
        lines = len(low.splitlines())
        base = hot_lines(low, lines)
        for extra in (("ask(",), ("foo(", "x(")):
            assert hot_lines(low, lines, extra, base) == hot_lines(low, lines, extra)


def test_project_roots_found_once_per_folder_are_the_same(tmp_path: Path) -> None:
    files = []
    for rel in ("a/x.py", "a/b/y.py", "a/b/c/z.py", "pkg/inner/w.py", "pkg/v.py", "top.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
        files.append(tmp_path / rel)
    (tmp_path / "a" / "b" / "pyproject.toml").write_text("")
    (tmp_path / "pkg" / "setup.cfg").write_text("")
    known: dict[Path, Path] = {}
    for path in files + files[::-1]:
        assert _root_within(path, tmp_path, tmp_path.resolve(), known) == _root_within(
            path, tmp_path, tmp_path.resolve()
        )
    assert _root_within(files[2], tmp_path, tmp_path.resolve(), known) == tmp_path / "a" / "b"
    assert _root_within(files[0], tmp_path, tmp_path.resolve(), known) == tmp_path


def test_the_determinism_bench_passes_a_project_and_its_neighbour(tmp_path: Path, capsys) -> None:
    repo, other = tmp_path / "repo", tmp_path / "other"
    (repo / "app").mkdir(parents=True)
    (repo / "app" / "__init__.py").write_text("")
    (repo / "app" / "prompts.py").write_text(
        "from langchain_core.prompts import PromptTemplate\n\n"
        'QA = PromptTemplate.from_template("Today: {today}\\n" + "Answer with care and cite sources. " * 30)\n'
    )
    (repo / "app" / "run.py").write_text(
        "from datetime import datetime\n\nfrom app.prompts import QA\n\n\n"
        "def run(llm):\n    return llm.invoke(QA.format(today=datetime.now()))\n"
    )
    (other / "app").mkdir(parents=True)
    (other / "app" / "prompts.py").write_text('QA = "{today}"\n')
    assert lint_determinism.main([str(repo), "--neighbour", str(other)]) == 0
    out = capsys.readouterr().out
    assert "repo: 3 files, 1 findings as a folder" in out, out
    assert out.count("identical") == 6 and "same findings in every run" in out, out
