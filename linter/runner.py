"""`lint_paths`: lint files and folders as one project, so prompts built in one module and sent in
another are followed; findings are reported only for the files asked about."""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from .analysis.bodies import source_text
from .analysis.facts import ParseFailure, parse
from .analysis.project import Project
from .checker import violations_for
from .files import ROOT_MARKERS, absolute, imports_of, iter_files, module_files, module_name, project_root
from .rules import RULES, SyntaxFailure
from .settings import Settings
from .violation import Violation

_COLLECT_EVERY = 4_000_000  # characters of source (about 100,000 lines) between garbage collections
_LEAN_ABOVE = 2_000_000  # characters of source in a group above which functions' bodies are dropped until read
_IMPORT_DEPTH = 2  # modules read for their summaries: the files given, what they import, and one more level


class Result(NamedTuple):
    """What `lint_paths` found: the violations of the files reported, and what it read."""

    violations: list[Violation]
    files: list[Path]  # the files reported on
    lines: int  # lines of the files reported on
    failures: list[str]  # files that could not be read or parsed (messages)
    sources: dict[str, str]  # filename -> source, of the files reported with findings (for fixes)


def _root_within(path: Path, folder: Path, folder_resolved: Path, known: dict[Path, Path] | None = None) -> Path:
    """The project a file found under `folder` belongs to: the nearest folder between them holding a
    project marker (a repository or package inside the folder), else the folder itself (`known`: the
    answers for folders already asked about, by folder)."""
    known = {} if known is None else known
    here, passed = path.parent, []
    while here not in known and here.resolve() != folder_resolved and here != here.parent:
        if any((here / marker).exists() for marker in ROOT_MARKERS):
            known[here] = here
            break
        passed.append(here)
        here = here.parent
    root = known.get(here, folder)
    for below in passed:
        known[below] = root
    return root


def _lint_group(
    members: list[tuple[Path, str, bool]], size: int, settings: Settings, sources: dict[str, str]
) -> list[Violation]:
    """One group of a project's modules ((path, module name, reported), `size` characters), linked by
    imports, analysed together. Each file is read again here: only the group's sources are held."""
    found: list[Violation] = []
    project = Project(lean=size > _LEAN_ABOVE)
    for path, name, reported in members:
        try:
            source = path.read_text(encoding="utf-8")
            parsed = parse(source, path.as_posix(), name)
        except (OSError, UnicodeDecodeError) as exc:  # changed since it was first read
            if reported:
                found.append(unanalyzable(path, f"cannot read: {exc}"))
            continue
        except ParseFailure as exc:
            if reported:  # one finding for the file, and the run goes on
                found.append(unanalyzable(path, exc.detail, exc.row, exc.col))
            continue
        except RecursionError:
            continue
        if parsed is not None:
            project.add(path, parsed, reported)
        else:
            project.defer(path, source, name, reported)
    try:
        project.run()
    except RecursionError:  # a limit of the analysis on some deeply nested file
        pass
    _keep_for_checks(project)
    if size > _LEAN_ABOVE:
        _return_freed_memory()
    for entry in project.entries:
        if entry.report:
            filename = entry.path.as_posix()
            parsed = entry.parsed._replace(source=source_text(entry.parsed))
            found_here = violations_for(entry.sites, parsed, filename, settings)
            if found_here:  # its source, for fixes
                sources[filename] = parsed.source
            found.extend(found_here)
    project.__dict__.clear()
    return found


#: What the checks (`violations_for`) read of a module: its text and its templates' variants.
_READ_BY_CHECKS = frozenset({"held_lines", "bodies", "variants", "num_lines", "name"})


def _keep_for_checks(project: Project) -> None:
    """Let go of all a group's analysis but what the checks read before they run: the reported modules
    with sites (a module without any has no findings), their sites and text. Their first exact token
    count loads the tokenizer's vocabulary (tens of MB), which then reuses that memory instead of adding
    to the group's peak."""
    checked = [entry for entry in project.entries if entry.report and entry.sites]
    for entry in checked:
        module = entry.parsed.module
        for name in [n for n in vars(module) if n not in _READ_BY_CHECKS]:
            delattr(module, name)
        if module.bodies is not None:  # its packed text, not the lean store (the texts it holds unpacked)
            module.bodies = (None, module.bodies[1])
    project.__dict__.clear()
    project.entries = checked


def _return_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's `malloc_trim`; nothing elsewhere) once a
    large group's analysis is let go: the tokenizer's vocabulary, loaded by the first exact count, then
    takes fresh pages instead of adding to the pages the freed analysis still held."""
    import ctypes

    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def import_groups(modules: list[tuple[str, list[str]]]) -> list[list[int]]:
    """Indices of `modules` ((dotted name, what it imports: `scan_imports`) of one project) grouped by
    imports between them (a module, what it imports and what imports it, transitively), each group in
    order, groups by first member."""
    parent = list(range(len(modules)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_suffix: dict[str, list[int]] = {}
    for i, (name, _) in enumerate(modules):
        parts = name.split(".") if name else []
        for k in range(len(parts)):
            by_suffix.setdefault(".".join(parts[k:]), []).append(i)
    for i, (_, imported) in enumerate(modules):
        for qual in imported:
            parts = qual.split(".")
            for k in range(len(parts), 0, -1):  # the module itself, or the package holding the name
                hits = by_suffix.get(".".join(parts[:k]), [])
                if len(hits) == 1:
                    if hits[0] != i:
                        parent[find(hits[0])] = find(i)
                    break
    groups: dict[int, list[int]] = {}
    for i in range(len(modules)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values())


_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+([.\w]+)[ \t]+import\b|import[ \t]+)(.*)$", re.MULTILINE)


def _import_lines(source: str) -> Iterator[re.Match[str]]:
    """`_IMPORT_LINE.finditer(source)`, trying only the lines holding `import` (a match lies within one line)."""
    at, last = source.find("import"), -1
    while at >= 0:
        start = source.rfind("\n", 0, at) + 1
        if start != last:
            last = start
            match = _IMPORT_LINE.match(source, start)
            if match is not None:
                yield match
        at = source.find("import", at + 6)


def scan_imports(source: str, name: str) -> list[str]:
    """The dotted names `source` (module `name`) imports, from its `import` lines (parenthesized or
    continued lists included), relative imports made absolute."""
    out: list[str] = []
    for match in _import_lines(source):
        base, rest = match.group(1), match.group(2)
        if "(" in rest and ")" not in rest:  # `from x import (\n a,\n b)`
            end = source.find(")", match.end())
            rest += source[match.end() : end if end >= 0 else match.end()]
        names = [n.strip().split(" as ")[0].strip() for n in rest.strip("() \t").split("#")[0].split(",")]
        names = [n.strip("() \t\\") for n in names if n.strip("() \t\\")]
        if base is None:
            out.extend(names)
            continue
        level = len(base) - len(base.lstrip("."))
        target = absolute(name, base.lstrip(".") or None, level)
        out.extend(f"{target}.{n}" if target else n for n in names if n != "*")
        if target:
            out.append(target)
    return out


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

    The cyclic garbage collector is paused meanwhile (its passes over the live trees took a third of
    the time); the groups already analysed are collected explicitly every `_COLLECT_EVERY` characters,
    so memory stays bounded by the largest group, not the tree."""
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
    known: dict[Path, dict[Path, Path]] = {folder: {} for folder, _ in folders}  # folder -> `_root_within`'s
    for path in report:
        for folder, folder_resolved in folders:
            if resolved_of[path].is_relative_to(folder_resolved):
                roots.setdefault(resolved_of[path], _root_within(path, folder, folder_resolved, known[folder]))
                break
    for path in explicit:
        roots.setdefault(path.resolve(), project_root(path))
    failures: list[str] = []
    violations: list[Violation] = []
    lines = 0
    sources: dict[str, str] = {}
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
    # Analyse each project root's files (read root by root) in groups linked by imports (what one
    # module's findings may depend on): only one group's trees are alive at a time.
    files_of: dict[Path, list[tuple[Path, str, bool]]] = {}  # root -> (path, module name, reported)
    for path in sorted(order, key=lambda p: (resolved_of.get(p) or p.resolve()).as_posix()):
        resolved = resolved_of.get(path) or path.resolve()
        root = roots.get(resolved, path.parent)
        if root not in root_resolved:  # one `resolve()` per root folder, not one per file
            root_resolved[root] = root.resolve()
        name = module_name(path, root, resolved, root_resolved[root])
        files_of.setdefault(root_resolved[root], []).append((path, name, context[resolved][1]))
    pending = 0  # source characters analysed since the last collection
    for _, listed in sorted(files_of.items()):
        members: list[tuple[Path, str, bool]] = []  # (path, module name, reported)
        imports: list[tuple[str, list[str]]] = []  # (module name, what it imports)
        sizes: list[int] = []  # characters
        for path, name, reported in listed:  # read for imports (its group reads it again)
            try:
                source = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                if reported:
                    violations.append(unanalyzable(path, f"cannot read: {exc}"))
                continue
            if reported:
                lines += source.count("\n") + 1
            members.append((path, name, reported))
            imports.append((name, scan_imports(source, name)))
            sizes.append(len(source))
        for group in import_groups(imports):
            size = sum(sizes[i] for i in group)
            violations.extend(_lint_group([members[i] for i in group], size, settings, sources))
            pending += size
            if pending > _COLLECT_EVERY:  # a group's trees and summaries hold cycles: free them now and then
                gc.collect()
                pending = 0
    order_of = {path.as_posix(): i for i, path in enumerate(report)}
    violations.sort(key=lambda v: (order_of.get(v.filename, len(order_of)), v.filename, v.row, v.col, v.code))
    return Result(violations, report, lines, failures, sources)
