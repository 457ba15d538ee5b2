"""The files promptlint reads: the Python files under the paths given, a project's root folder, a
file's dotted module name, and the files behind an import."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

from .settings import Settings

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
#: Never code: version control, caches, build output. (Virtual environments and vendored
#: packages are `settings.DEFAULT_EXCLUDES`, which `--no-default-excludes` turns off.)
_SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        "__pycache__",
        ".tox",
        ".nox",
        "build",
        "dist",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".eggs",
    }
)


class MissingPath(Exception):
    """A path given to lint does not exist; the message names it."""


def iter_files(paths: list[str], settings: Settings, force_exclude: bool) -> Iterator[Path]:
    """Python files under `paths`, excluded ones skipped (explicit files only with
    `force_exclude`)."""
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            if not (force_exclude and settings.is_excluded(path)):
                yield path
        elif path.is_dir():
            for folder, dirs, files in os.walk(path):
                dirs[:] = sorted(
                    d
                    for d in dirs
                    if d not in _SKIP_DIRS
                    and not settings.is_default_excluded(d)
                    and not settings.is_excluded(Path(folder) / d)
                )
                for name in sorted(files):
                    file = Path(folder) / name
                    if name.endswith((".py", ".pyi")) and not settings.is_excluded(file):
                        yield file
        else:
            raise MissingPath(f"{raw}: no such file or directory")


def project_root(path: Path) -> Path:
    """The nearest folder above `path` with a project marker, else `path`'s folder."""
    start = path.resolve().parent
    for folder in [start, *start.parents]:
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
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


def absolute(name: str, target: str | None, level: int) -> str:
    """`from ..x import y` inside module `name` -> the package path of `x`."""
    if not level:
        return target or ""
    package = name.split(".")[:-level] if name else []
    return ".".join(package + ([target] if target else []))


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
            base = absolute(name, node.module, node.level)
            out.extend(f"{base}.{alias.name}" if base else alias.name for alias in node.names)
    return out
