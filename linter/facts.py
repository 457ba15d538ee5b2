"""A module's facts, collected once before any function is read: imports, top-level functions,
classes and their fields, literal string constants, a global `random.seed`."""

from __future__ import annotations

import ast
import collections
from collections.abc import Iterator

from . import sinks
from .expressions import Evaluator
from .scope import Module, Scope
from .walker import is_template_text


def collect_module(tree: ast.Module, lines: list[str], hot_prefix: list[int], name: str = "") -> Module:
    """Imports, top-level functions, classes and their fields, literal string constants and a global
    `random.seed` (`hot_prefix`: `Module.hot_prefix`; `name`: the dotted module name, for relative
    imports)."""
    module = Module(lines)
    module.name = name
    module.hot_prefix = hot_prefix
    stack = tree.body[::-1]  # in source order: a constant may be built from earlier ones
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                module.imports[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(stmt, ast.ImportFrom) and (stmt.module or stmt.level):
            source = absolute(name, stmt.module, stmt.level)
            for alias in stmt.names:
                module.imports[alias.asname or alias.name] = f"{source}.{alias.name}" if source else alias.name
        elif isinstance(stmt, ast.ClassDef):
            _collect_class(module, stmt)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.functions.setdefault(stmt.name, stmt)
        elif isinstance(stmt, (ast.If, ast.Try)):
            for handler in getattr(stmt, "handlers", [])[::-1]:
                stack.extend(handler.body[::-1])
            stack.extend(getattr(stmt, "orelse", [])[::-1])
            stack.extend(stmt.body[::-1])
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            found = Evaluator(module).literal(stmt.value, Scope())
            if found is not None:  # (not `name`: that is the module's, for relative imports further down)
                target = stmt.targets[0].id
                module.literals[target], module.literal_nodes[target] = found
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            if module.qualname(stmt.value.func) in ("random.seed", "numpy.random.seed"):
                module.is_random_seeded = bool(stmt.value.args)
    for name, qual in list(module.imports.items()):
        if qual.startswith("radixgate") and qual.endswith(".Prompt"):
            module.prompt_names.add(name)
    module.qualnames = {}  # the imports are complete: dotted names can be remembered
    return module


def absolute(name: str, target: str | None, level: int) -> str:
    """`from ..x import y` inside module `name` -> the package path of `x`."""
    if not level:
        return target or ""
    package = name.split(".")[:-level] if name else []
    return ".".join(package + ([target] if target else []))


def _collect_class(module: Module, cls: ast.ClassDef) -> None:
    """A class's string fields, the values its methods store on `self`, and whether it is a custom
    LangChain prompt template."""
    module.classes[cls.name] = cls
    if any((sinks.chain(b) or "").endswith("PromptTemplate") for b in cls.bases):
        module.prompt_classes.add(cls.name)
    for stmt in cls.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target = stmt.target
        value = getattr(stmt, "value", None)
        if isinstance(target, ast.Name) and value is not None:
            module.attr_exprs[(cls.name, target.id)] = value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                module.attr_literals[(cls.name, target.id)] = (value.value, value)
                if is_template_text(target.id, value.value):
                    module.template_constants.append((target.id, value))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            stmt.name == "__init__" or module.is_hot(stmt.lineno, stmt.end_lineno or stmt.lineno)
        ):
            for node in _statements(stmt):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    t = node.targets[0]
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        module.attr_exprs.setdefault((cls.name, t.attr), node.value)


_BLOCK_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")
_BLOCKS_OF: dict[type, tuple[str, ...]] = {}


def _statements(root: ast.stmt) -> Iterator[ast.AST]:
    """The statements under `root` in `ast.walk`'s order, without visiting any expression."""
    todo = collections.deque([root])
    while todo:
        node = todo.popleft()
        cls = node.__class__
        fields = _BLOCKS_OF.get(cls)
        if fields is None:
            fields = _BLOCKS_OF[cls] = tuple(f for f in cls._fields if f in _BLOCK_FIELDS)
        for name in fields:
            todo.extend(getattr(node, name))
        yield node
