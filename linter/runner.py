"""`lint_paths`: lint files and folders as one project, so prompts built in one module and sent in
another are followed; findings are reported only for the files asked about."""

from __future__ import annotations

import ast
import gc
from pathlib import Path
from typing import NamedTuple

from .analysis.facts import ParseFailure, parse
from .analysis.project import Project
from .checker import violations_for
from .files import ROOT_MARKERS, imports_of, iter_files, module_files, module_name, project_root
from .rules import RULES, SyntaxFailure
from .settings import Settings
from .violation import Violation

_IMPORT_DEPTH = 2  # modules read for their summaries: the files given, what they import, and one more level


class Result(NamedTuple):
    """What `lint_paths` found: the violations of the files reported, and what it read."""

    violations: list[Violation]
    files: list[Path]  # the files reported on
    lines: int  # lines of the files reported on
    failures: list[str]  # files that could not be read or parsed (messages)
    sources: dict[str, tuple[str, ast.Module]]  # filename -> (source, tree), for fixes


def _root_within(path: Path, folder: Path, folder_resolved: Path) -> Path:
    """The project a file found under `folder` belongs to: the nearest folder between them holding a
    project marker (a repository or package inside the folder), else the folder itself."""
    here = path.parent
    while here.resolve() != folder_resolved and here != here.parent:
        if any((here / marker).exists() for marker in ROOT_MARKERS):
            return here
        here = here.parent
    return folder


def unanalyzable(path: Path, detail: str, row: int = 1, col: int = 1) -> Violation:
    """E999: a file that cannot be parsed or read, reported as one finding."""
    rule = RULES[SyntaxFailure.code]
    return Violation(rule.code, rule.format(detail=detail), path.as_posix(), row, col, row, col, "error")


def _by_root(explicit: list[Path], roots: dict[Path, Path]) -> dict[Path, list[Path]]:
    out: dict[Path, list[Path]] = {}
    for path in explicit:
        out.setdefault(roots[path.resolve()], []).append(path)
    return out


def _importers(root: Path, given: list[Path], settings: Settings) -> list[Path]:
    """The project's files (under `root`) that import one of the `given` files: a staged template's
    callers fill its placeholders, so they are read (not reported) as a folder's lint would read them."""
    wanted = {module_name(path, root) for path in given} - {""}
    last = {name.rpartition(".")[2] for name in wanted}
    given_resolved = {path.resolve() for path in given}
    found = []
    for candidate in iter_files([str(root)], settings, False):
        try:
            text = candidate.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "import" not in text or not any(word in text for word in last) or candidate.resolve() in given_resolved:
            continue
        if any(q in wanted or q.rpartition(".")[0] in wanted for q in imports_of(candidate, root)):
            found.append(candidate)
    return found


def lint_paths(paths: list[str], settings: Settings, force_exclude: bool = False) -> Result:
    """Lint `paths` as one project. Folders: every Python file under them. Explicit files: those
    files, with the project modules they import read for summaries only.

    The cyclic garbage collector is paused meanwhile: the trees and summaries stay alive until the
    end anyway, and its passes over them took a third of the time (nothing is lost: what is cyclic
    is collected once it is back on)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _lint_paths(paths, settings, force_exclude)
    finally:
        if enabled:
            gc.enable()


def _lint_paths(paths: list[str], settings: Settings, force_exclude: bool) -> Result:
    report = list(iter_files(paths, settings, force_exclude))
    context: dict[Path, tuple[Path, bool]] = {}  # resolved -> (path, reported)
    roots: dict[Path, Path] = {}
    resolved_of: dict[Path, Path] = {path: path.resolve() for path in report}
    for path in report:
        context[resolved_of[path]] = (path, True)
    explicit = [Path(p) for p in paths if Path(p).is_file()]
    folders = [(Path(raw), Path(raw).resolve()) for raw in paths if Path(raw).is_dir()]
    for path in report:
        for folder, folder_resolved in folders:
            if resolved_of[path].is_relative_to(folder_resolved):
                roots.setdefault(resolved_of[path], _root_within(path, folder, folder_resolved))
                break
    for path in explicit:
        roots.setdefault(path.resolve(), project_root(path))
    failures: list[str] = []
    violations: list[Violation] = []
    lines = 0
    sources: dict[str, tuple[str, ast.Module]] = {}
    queue = [(path, 0) for path in explicit]
    seen: set[Path] = set()
    order = list(report)
    root_resolved: dict[Path, Path] = {}
    for root, given in _by_root(explicit, roots).items():  # project modules importing an explicit file
        for importer in _importers(root, given, settings):
            resolved = importer.resolve()
            if resolved in context or resolved in seen:
                continue
            seen.add(resolved)
            roots[resolved] = root
            context[resolved] = (importer, False)
            order.append(importer)
            resolved_of[importer] = resolved
            queue.append((importer, 0))  # read with its own imports, as a folder's lint would
    while queue:  # modules imported by explicit files (and their importers), for summaries
        path, depth = queue.pop()
        root = roots[path.resolve()]
        for qual in imports_of(path, root):
            for candidate in module_files(root, qual):
                resolved = candidate.resolve()
                if resolved in context or resolved in seen or settings.is_excluded(candidate):
                    continue
                seen.add(resolved)
                roots[resolved] = root
                context[resolved] = (candidate, False)
                order.append(candidate)
                resolved_of[candidate] = resolved
                if depth + 1 < _IMPORT_DEPTH:
                    queue.append((candidate, depth + 1))
    projects: dict[Path, Project] = {}  # one per project root: unrelated projects never meet
    for path in sorted(order, key=lambda p: (resolved_of.get(p) or p.resolve()).as_posix()):
        resolved = resolved_of.get(path) or path.resolve()
        _, reported = context[resolved]
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            if reported:
                violations.append(unanalyzable(path, f"cannot read: {exc}"))
            continue
        if reported:
            lines += source.count("\n") + 1
        root = roots.get(resolved, path.parent)
        if root not in root_resolved:  # one `resolve()` per root folder, not one per file
            root_resolved[root] = root.resolve()
        name = module_name(path, root, resolved, root_resolved[root])
        try:
            parsed = parse(source, path.as_posix(), name)
        except ParseFailure as exc:
            if reported:  # one finding for the file, and the run goes on
                violations.append(unanalyzable(path, exc.detail, exc.row, exc.col))
            continue
        except RecursionError:
            continue
        project = projects.setdefault(root_resolved[root], Project())
        if parsed is not None:
            project.add(path, parsed, reported)
        else:
            project.defer(path, source, name, reported)
    for _, project in sorted(projects.items()):
        try:
            project.run()
        except RecursionError:  # a limit of the analysis on some deeply nested file
            pass
        for entry in project.entries:
            if entry.report:
                filename = entry.path.as_posix()
                violations.extend(violations_for(entry.sites, entry.parsed, filename, settings))
                sources[filename] = (entry.parsed.source, entry.parsed.tree)
        project.entries = [e for e in project.entries if e.report]  # the rest is not needed any more
    order_of = {path.as_posix(): i for i, path in enumerate(report)}
    violations.sort(key=lambda v: (order_of.get(v.filename, len(order_of)), v.filename, v.row, v.col, v.code))
    return Result(violations, report, lines, failures, sources)
