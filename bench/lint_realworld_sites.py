"""Where a labelled prompt site's template text lives, for `lint_realworld`'s matching.

A site is labelled where the prompt is used (`prompt = TEMPLATE.format(issue=...)`, an LLM call), but
the line a human edits to fix a breaker is the template's text, which is where promptlint reports it when
the template is a named constant. So that both places count for the same site, each label gets `refs`:
the assignments in the same repository of the names its span uses (module and class level anywhere in the
file, or in the same function; names imported from another file of the repository), followed one more step
(`system = TEMPLATE.format(...)` then `messages=[..., system]`). Found syntactically, without promptlint.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

_COMMON = {"self", "str", "format", "content", "role", "messages", "model", "None", "True", "False", "await"}

Span = tuple[str, int, int]  # (path, first line, last line)


class _File:
    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.lines = source.splitlines()
        self.defs: dict[str, list[tuple[int, int, tuple[int, int] | None]]] = defaultdict(list)
        self.imports: set[str] = set()
        self.uses: list[tuple[int, str]] = []  # (line, name) of every name and attribute read
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return
        self._visit(tree.body, None)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                self.imports.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                self.uses.append((node.lineno, node.id))
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                self.uses.append((node.end_lineno or node.lineno, node.attr))

    def _visit(self, body: list[ast.stmt], function: tuple[int, int] | None) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._visit(stmt.body, (stmt.lineno, stmt.end_lineno or stmt.lineno))
                continue
            if isinstance(stmt, ast.ClassDef):
                self._visit(stmt.body, function)
                continue
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, (ast.AnnAssign, ast.AugAssign))
                else []
            )
            for target in targets:
                name = (
                    target.id
                    if isinstance(target, ast.Name)
                    else target.attr
                    if isinstance(target, ast.Attribute)
                    else None
                )
                if name:
                    self.defs[name].append((stmt.lineno, stmt.end_lineno or stmt.lineno, function))
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                    self._visit(inner, function)
            for handler in getattr(stmt, "handlers", []):
                self._visit(handler.body, function)

    def function_of(self, line: int) -> tuple[int, int] | None:
        best = None
        for spans in self.defs.values():
            for _, _, fn in spans:
                if fn and fn[0] <= line <= fn[1] and (best is None or fn[1] - fn[0] < best[1] - best[0]):
                    best = fn
        return best


class Repository:
    """The Python files of one repository under `root`, parsed on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, _File] = {}

    def file(self, path: str) -> _File | None:
        if path not in self.files:
            try:
                self.files[path] = _File(path, (self.root / path).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                return None
        return self.files[path]

    def all_files(self) -> list[_File]:
        for p in self.root.rglob("*.py"):
            self.file(p.relative_to(self.root).as_posix())
        return [f for f in self.files.values() if f is not None]

    def refs(self, path: str, line: int, end_line: int, depth: int = 2) -> set[Span]:
        """Assignments of the names used in `path`'s lines `line..end_line` (see the module doc)."""
        here = self.file(path)
        if here is None:
            return set()
        function = here.function_of(line)
        found: set[Span] = set()
        for name in {name for at, name in here.uses if line <= at <= end_line} - _COMMON:
            spans = [
                (path, a, b)
                for a, b, fn in here.defs.get(name, [])
                if (fn is None or (fn == function and a < line)) and not (a <= line and end_line <= b)
            ]
            if not spans and name in here.imports:
                spans = [(f.path, a, b) for f in self.all_files() if f is not here for a, b, fn in f.defs.get(name, [])]
            found.update(spans)
        if depth > 1:
            for p, a, b in list(found):
                found |= self.refs(p, a, b, depth - 1)
        return found


def attach_refs(sources: Path, labels: list[dict], folder: str = "+") -> None:
    """Give every label its `refs` (spans of the template text it uses), in place."""
    repos: dict[str, Repository] = {}
    for lab in labels:
        root = sources / lab["repo"].replace("/", folder, 1)
        repo = repos.setdefault(lab["repo"], Repository(root))
        refs = repo.refs(lab["path"], lab["line"], lab["end_line"]) if root.is_dir() else set()
        # `template_refs`: the template text a labeller found behind the site where names do not lead to it
        refs |= {(p, a, b) for p, a, b in lab.get("template_refs", [])}
        lab["refs"] = sorted(refs)
