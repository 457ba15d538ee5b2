"""A file parsed, and its module's facts collected once before any function is read: imports,
top-level functions, classes and their fields, literal string constants, a global `random.seed`, and
which lines may hold part of a prompt."""

from __future__ import annotations

import ast
import bisect
import collections
import itertools
import re
from collections.abc import Iterator
from typing import NamedTuple

from ..files import absolute
from . import sinks
from .calls import Evaluator
from .scope import Module, Scope
from .shape import child_nodes
from .walker import is_template_text, read_function

#: Files without any of these words (lower-cased) cannot build a prompt promptlint recognizes.
_TRIGGER_WORDS = (
    "prompt",
    "messages",
    "role",
    "template",
    "completion",
    "invoke",
    "system",
    "instruction",
    "preamble",
    "generate_content",
    "predict",
    "complete",
    ".post(",
)
#: A statement or function none of whose lines has one of these cannot hold a prompt site or
#: fill a template placeholder, so the walker does not look inside it.
_HOT_WORDS = _TRIGGER_WORDS + (
    "create",
    "generate",
    "post",
    "format",
    "partial",
    "kwargs[",
    "inputs[",
    ".run(",
    ".stream(",
    "from_",
    "message",
)
#: The words `hot_lines` searches for: a word that contains another (`messages`, `message`) finds no new line.
_SCAN_WORDS = tuple(w for w in _HOT_WORDS if not any(o != w and o in w for o in _HOT_WORDS))


class ParseFailure(Exception):
    """The file is not valid Python; the message says where (`row`, `col`: 1-based)."""

    def __init__(self, message: str, row: int = 1, col: int = 1, detail: str = "") -> None:
        super().__init__(message)
        self.row, self.col, self.detail = row, col, detail or message


class Parsed(NamedTuple):
    """A parsed file and the facts collected from it."""

    tree: ast.Module
    module: Module
    source: str

    @property
    def lines(self) -> list[str]:
        return self.module.lines


def parse(source: str, filename: str, name: str = "", force: bool = False) -> Parsed | None:
    """Parse `source` and collect its module facts; None when it cannot hold a prompt (unless
    `force`: another module imports its names)."""
    low = source.lower()
    if not force and not any(word in low for word in _TRIGGER_WORDS):
        return None
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        where = f"{filename}:{exc.lineno}:{exc.offset}"
        detail = f"syntax error: {exc.msg}"
        raise ParseFailure(f"{where}: cannot parse: {exc.msg}", exc.lineno or 1, exc.offset or 1, detail) from None
    except ValueError as exc:  # a null byte (before Python 3.12)
        raise ParseFailure(f"{filename}:1:1: cannot parse: {exc}", 1, 1, f"syntax error: {exc}") from None
    lines = source.splitlines()
    module = collect_module(tree, lines, hot_lines(low, len(lines)), name)
    module.may_use_radixgate = "radixgate" in source or any(q.startswith("radixgate") for q in module.imports.values())
    return Parsed(tree, module, source)


def collect_module(tree: ast.Module, lines: list[str], hot: bytearray, name: str = "") -> Module:
    """Imports, top-level functions, classes and their fields, literal string constants and a global
    `random.seed` (`hot`: `Module.hot_lines`; `name`: the dotted module name, for relative
    imports)."""
    module = Module(lines)
    module.num_lines = len(lines)
    module.name = name
    module.hot_lines = hot
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
            found = Evaluator(module, read_function).literal(stmt.value, Scope())
            if found is not None:  # (not `name`: that is the module's, for relative imports further down)
                target = stmt.targets[0].id
                module.literals[target], module.literal_nodes[target] = found
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            if module.qualname(stmt.value.func) in ("random.seed", "numpy.random.seed"):
                module.is_random_seeded = bool(stmt.value.args)
    if any("seed(" in line for line in lines):
        for node in _walk(tree):  # `ast.walk`'s order: the first such call is named
            if (
                isinstance(node, ast.Call)
                and node.args
                and module.qualname(node.func) in ("random.seed", "numpy.random.seed")
            ):
                module.seed_call = ast.unparse(node)
                break
    for name, qual in list(module.imports.items()):
        if qual.startswith("radixgate") and qual.endswith(".Prompt"):
            module.prompt_names.add(name)
    module.qualnames = {}  # the imports are complete: dotted names can be remembered
    return module


def _walk(tree: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk(tree)`, less contexts and operators (leaves: the others keep their order)."""
    todo = collections.deque([tree])
    while todo:
        node = todo.popleft()
        todo.extend(child_nodes(node))
        yield node


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


# Searched in the reversed source, where each match starts at a literal `(` (found fast, no backtracking).
_CALLED = re.compile(r"\(\s*(\w+)")  # a name called (`name (`), reversed
_CALL_RUN = re.compile(r"\((\w+)")  # the word characters right before a `(`, reversed
PLAIN_NAME = re.compile(r"[a-z0-9_]+")


def called_names(low: str) -> set[str]:
    """The names `low` calls: each word run followed by `(` (spaces allowed between)."""
    return {run[::-1] for run in _CALLED.findall(low[::-1])}


def called_suffixes(low: str) -> set[str]:
    """Every `w` such that `w(` occurs in `low`: each word run right before a `(`, and each of its
    suffixes (exact for `PLAIN_NAME` words, which lie inside such a run)."""
    out: set[str] = set()
    for run in set(_CALL_RUN.findall(low[::-1])):
        out.update(run[i::-1] for i in range(len(run)))
    return out


def hot_lines(low: str, num_lines: int, extra: tuple[str, ...] = (), base: bytearray | None = None) -> bytearray:
    """The lines holding a `_HOT_WORDS` word (or one of `extra`, such as the names of the project's
    wrappers): marked[i] is 1 for such a line i (1-based; marked[0] is 0). A byte a line, not a count
    a line (an int object each past 256). `base`: these marks without `extra`, already computed (only
    `extra` is searched then)."""
    find = low.find
    starts = [0, *itertools.accumulate(map((1).__add__, map(len, low.split("\n"))))]  # each line's offset
    size = max(num_lines, len(starts)) + 1
    if base is not None and len(base) == size:
        marked = bytearray(base)
    else:
        marked, base = bytearray(size), None
    for word in extra if base is not None else _SCAN_WORDS + extra:
        at = find(word)
        while at >= 0:
            line = bisect.bisect_right(starts, at)
            marked[line] = 1
            at = find(word, starts[line])  # the next line: one hit per line is enough
    return marked
