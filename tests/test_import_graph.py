"""A package's import graph, read from its source with `ast`: no cycle among its imports, and no import
inside a function that hides one. The helpers take any folder and the package name it installs as, so
each package of the repository can be held to the same rule; promptlint (`linter/`) is checked here.

An import is `module` level (executed when the module loads, inside `if`/`try`/class bodies too),
`typing` level (under `if TYPE_CHECKING:`) or `function` level (executed when the function runs). A
function-level import *hides a cycle* when the module it imports, through module-level imports, imports
the importer back: the import was moved into the function only so that the cycle does not fail at load.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
LEVELS = ("module", "typing", "function")


class Import(NamedTuple):
    """One import statement's edge to a module of the same package."""

    importer: str  # dotted name of the importing module
    target: str  # dotted name of the imported module (a package's `__init__` is the package's name)
    line: int
    level: str  # "module", "typing" or "function"


def module_names(folder: Path, package: str) -> dict[str, Path]:
    """Every module under `folder` by its dotted name, `folder` installed as `package`."""
    names = {}
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = [package, *path.relative_to(folder).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules: set[str]) -> list[str]:
    """The package's modules that `node` loads (a name imported from a package that is a submodule
    counts as that submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules]
    if node.level:
        base = importer.split(".")
        drop = node.level - 1 if is_package else node.level
        base = base[: len(base) - drop] if drop else base
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    found = []
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        if submodule in modules:
            found.append(submodule)
        elif source in modules:
            found.append(source)
    return list(dict.fromkeys(found))


def import_graph(folder: Path, package: str) -> list[Import]:
    """Every import between modules of `package` (installed from `folder`), at its level."""
    modules = module_names(folder, package)
    known = set(modules)
    edges: list[Import] = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"

        def visit(node: ast.AST, level: str, name: str = name, is_package: bool = is_package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(child, name, is_package, known):
                        if target != name:
                            edges.append(Import(name, target, child.lineno, level))
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(child, "function")
                elif isinstance(child, ast.If) and level == "module" and _is_type_checking(child.test):
                    for stmt in child.body:
                        visit(ast.Module(body=[stmt], type_ignores=[]), "typing")
                    for stmt in child.orelse:
                        visit(ast.Module(body=[stmt], type_ignores=[]), "module")
                else:
                    visit(child, level)

        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "module")
    return edges


def _successors(imports: Iterable[Import], levels: Iterable[str]) -> dict[str, set[str]]:
    wanted = set(levels)
    graph: dict[str, set[str]] = {}
    for edge in imports:
        if edge.level in wanted:
            graph.setdefault(edge.importer, set()).add(edge.target)
    return graph


def cycles(imports: Iterable[Import], levels: Iterable[str] = LEVELS) -> list[list[str]]:
    """The import cycles among edges of `levels`: each strongly connected group of modules, sorted."""
    graph = _successors(imports, levels)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def hidden_cycles(imports: Iterable[Import], through: Iterable[str] = ("module", "typing")) -> list[Import]:
    """Function-level imports whose target, through imports of the `through` levels, imports the
    importer back."""
    imports = list(imports)
    graph = _successors(imports, through)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = {start}, [start]
        while todo:
            for succ in graph.get(todo.pop(), ()):
                if succ == goal:
                    return True
                if succ not in seen:
                    seen.add(succ)
                    todo.append(succ)
        return False

    return [edge for edge in imports if edge.level == "function" and reaches(edge.target, edge.importer)]


# -- the helpers, on a package whose cycles are known --------------------------------------------------
def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_helpers_find_module_level_hidden_and_lazy_cycles(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "__init__.py": "from .a import A\n",
            "a.py": "from . import b\nA = 1\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
            "c.py": "def f():\n    from .sub.d import D\n",
            "sub/__init__.py": "",
            "sub/d.py": "from ..c import f\nD = 1\n",
            "e.py": "def g():\n    from . import f as x\n",
            "f.py": "class K:\n    def m(self):\n        from .e import g\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert ("pkg.c", "pkg.sub.d", 2, "function") in graph
    assert ("pkg.sub.d", "pkg.c", 1, "module") in graph
    assert ("pkg", "pkg.a", 1, "module") in graph
    assert ("pkg.b", "pkg.a", 3, "typing") in graph
    assert cycles(graph, ("module",)) == []
    assert cycles(graph, ("module", "typing")) == [["pkg.a", "pkg.b"]]
    assert [(e.importer, e.target) for e in hidden_cycles(graph)] == [("pkg.c", "pkg.sub.d")]
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.d"], ["pkg.e", "pkg.f"]]


# -- promptlint ----------------------------------------------------------------------------------------
def _linter() -> list[Import]:
    return import_graph(ROOT / "linter", "radixgate.linter")


def test_linter_has_no_cycle_among_module_level_imports() -> None:
    assert cycles(_linter(), ("module", "typing")) == []


def test_linter_has_no_function_level_import_that_hides_a_cycle() -> None:
    assert hidden_cycles(_linter()) == []


def test_linter_has_no_import_cycle_even_between_function_level_imports() -> None:
    assert cycles(_linter()) == []


#: promptlint's analysis core, each module after the ones it imports (as `linter/analysis/__init__.py` lists them).
ANALYSIS_ORDER = (
    "shape",
    "names",
    "scope",
    "bodies",
    "placeholders",
    "expressions",
    "calls",
    "builders",
    "site",
    "sinks",
    "walker",
    "facts",
    "reader",
    "ordering",
    "project",
)


def test_linter_analysis_modules_import_only_those_listed_before_them() -> None:
    package = "radixgate.linter.analysis"
    names = {m.removeprefix(package + ".") for m in module_names(ROOT / "linter" / "analysis", package)} - {package}
    assert names == set(ANALYSIS_ORDER)
    rank = {name: i for i, name in enumerate(ANALYSIS_ORDER)}
    inside = [e for e in _linter() if e.importer.startswith(package + ".")]
    upward = [
        e
        for e in inside
        if e.target.startswith(package + ".")
        and rank[e.target.removeprefix(package + ".")] >= rank[e.importer.removeprefix(package + ".")]
    ]
    assert upward == []
    # Above the analysis, only the rule catalog (the codes it reports) and the files' module names.
    assert {e.target for e in inside if not e.target.startswith(package + ".")} <= {
        "radixgate.linter.rules",
        "radixgate.linter.files",
    }
