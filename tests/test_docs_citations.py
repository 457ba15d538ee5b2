"""What the docs cite exists: every repository path named in README.md and docs/*.md, and every
`path::name` (a test, fixture or function) is defined in that file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP_FOLDERS = ("engine", "gateway", "sdk", "linter", "bench", "deploy", "examples", "tests", "docs")
CITED = re.compile(rf"(?<![\w/.-])((?:{'|'.join(TOP_FOLDERS)})/[\w./+-]*\w)(?:::(\w+))?")


def _doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _citations() -> list[tuple[str, str, str | None]]:
    found = []
    for doc in _doc_files():
        text = doc.read_text(encoding="utf-8")
        for match in CITED.finditer(text):
            found.append((doc.name, match.group(1), match.group(2)))
    return found


def test_docs_cite_paths_that_exist() -> None:
    citations = _citations()
    assert any(path.startswith("tests/") for _, path, _ in citations)  # the pattern does see test paths
    missing = [f"{doc}: {path}" for doc, path, _ in citations if not (ROOT / path).exists() and "*" not in path]
    assert missing == []


def test_docs_cite_tests_and_fixtures_that_are_defined() -> None:
    undefined = []
    for doc, path, name in _citations():
        if name is None or not (ROOT / path).is_file():
            continue
        source = (ROOT / path).read_text(encoding="utf-8")
        if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", source, re.M):
            undefined.append(f"{doc}: {path}::{name}")
    assert undefined == []


def test_the_module_map_names_every_module() -> None:
    """docs/architecture.md says in one line what each module owns: a new module comes with its line."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    unnamed = []
    for folder in ("engine", "gateway", "linter", "sdk", "bench", "deploy"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "__init__.py" or "__pycache__" in path.parts:
                continue
            inner = path.relative_to(ROOT / folder).as_posix()
            if f"`{inner}`" not in text and f"`{path.name}`" not in text:
                unnamed.append(path.relative_to(ROOT).as_posix())
    assert unnamed == []
