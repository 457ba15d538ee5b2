"""Where a project's modules are: its root folder, a file's dotted name, the files behind an import."""

from __future__ import annotations

import ast
from pathlib import Path

_ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def project_root(path: Path) -> Path:
    """The nearest folder above `path` with a project marker, else `path`'s folder."""
    start = path.resolve().parent
    for folder in [start, *start.parents]:
        if any((folder / marker).exists() for marker in _ROOT_MARKERS):
            return folder
    return start


def module_name(path: Path, root: Path, resolved: Path | None = None, root_resolved: Path | None = None) -> str:
    """`path`'s dotted name under `root` (`resolved`, `root_resolved`: `path.resolve()` and
    `root.resolve()`, when already known)."""
    try:
        rel = (resolved or path.resolve()).relative_to(root_resolved or root.resolve())
    except ValueError:
        return path.stem
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_files(root: Path, qual: str) -> list[Path]:
    """Candidate files for the dotted import `qual` (or its parent, when it names a symbol)."""
    parts = qual.split(".")
    out = []
    for n in (len(parts), len(parts) - 1):
        if n <= 0:
            continue
        rel = Path(*parts[:n])
        for base in (root, root / "src"):
            for candidate in (base / rel.with_suffix(".py"), base / rel / "__init__.py"):
                if candidate.is_file():
                    out.append(candidate)
    return out


def imports_of(path: Path, root: Path) -> list[str]:
    """Absolute dotted names `path` imports (relative imports resolved against `root`)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    name = module_name(path, root)
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            from .facts import absolute

            base = absolute(name, node.module, node.level)
            out.extend(f"{base}.{alias.name}" if base else alias.name for alias in node.names)
    return out
