"""What the checker knows about names: the module (imports, constants, templates, functions) and
the function being read (its local values and lists)."""

from __future__ import annotations

import ast
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .shape import Flaw, Shape


class ParamRef(ast.Name):
    """A use of a function's parameter: `fn` is the function's project key, `index` its position
    (None for keyword-only). Parts carrying one tell a wrapper's summary where the argument goes."""

    fn: tuple[str, str | None, str]
    index: int | None


class Elsewhere(ast.expr):
    """A part that came from another function (a wrapper's own text): positioned at the call that
    brought it in, never reported there (its own function reports it)."""

    _fields = ()


def elsewhere(node: ast.AST) -> Elsewhere:
    """An `Elsewhere` part placed at `node`."""
    spot = Elsewhere()
    ast.copy_location(spot, node)
    spot.end_lineno, spot.end_col_offset = node.end_lineno, node.end_col_offset  # type: ignore[attr-defined]
    return spot


@dataclass
class ListValue:
    """A list built in the code: its element expressions in order (`ast.Starred` for values
    spliced in with `*history` or `.extend(docs)`) and how its order is flawed."""

    elements: list[ast.expr] = field(default_factory=list)
    flaws: tuple[Flaw, ...] = ()


@dataclass
class Module:
    """Facts about one source file, collected before any function is read."""

    held_lines: list[str] | None  # `lines`, None while a lean project has dropped them
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    may_use_radixgate: bool = True  # False: no name here can reach radixgate (`builders` skips its checks)
    constants: dict[str, Shape] = field(default_factory=dict)
    literals: dict[str, str] = field(default_factory=dict)  # name -> literal string value
    literal_nodes: dict[str, ast.expr] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    # LangChain-style placeholder fillings seen anywhere in the module: name -> value shapes.
    fillings: dict[str, list[Shape]] = field(default_factory=dict)
    partial_names: set[str] = field(default_factory=set)
    call_filled: set[str] = field(default_factory=set)  # placeholders filled inside a function
    # `.format` fillings of one template text where the receiver is known: text -> key -> shapes.
    text_fillings: dict[str, dict[str, list[Shape]]] = field(default_factory=dict)
    text_call_filled: set[tuple[str, str]] = field(default_factory=set)  # (text, key) filled per call
    is_random_seeded: bool = False  # `random.seed(x)` at the top level: draws made at import are fixed
    seed_call: str = ""  # a `random.seed(x)` anywhere in the module, as written (for KV203's message)
    shown: dict[str, bool] = field(default_factory=dict)  # name -> only printed or written out (`shown_only`)
    returns: dict[str, Shape] = field(default_factory=dict)
    in_progress: set[str] = field(default_factory=set)
    prompt_names: set[str] = field(default_factory=set)  # names bound to radixgate's Prompt class
    hot_lines: bytearray = field(default_factory=bytearray)  # 1 at each line worth a look (`facts.hot_lines`)
    num_lines: int = 0  # len(lines)
    name: str = ""  # dotted module name within the project
    project: Any = None  # the `project.Project` being linted, when there is one
    bodies: Any = None  # (`bodies.Bodies`, compressed source) once its functions' bodies are dropped (`bodies.release`)
    # Classes: their `self.x` / class-level fields, recorded as methods assign them.
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    attr_shapes: dict[tuple[str, str], Shape] = field(default_factory=dict)
    attr_literals: dict[tuple[str, str], tuple[str, ast.expr]] = field(default_factory=dict)
    attr_exprs: dict[tuple[str, str], ast.expr] = field(default_factory=dict)
    exprs: dict[str, ast.expr] = field(default_factory=dict)  # module-level names bound to a call or dict
    prompt_classes: set[str] = field(default_factory=set)  # subclasses of a LangChain *PromptTemplate
    # Names imported from other modules of the project: literal templates and constant shapes.
    imported_literals: dict[str, str] = field(default_factory=dict)
    imported_constants: dict[str, Shape] = field(default_factory=dict)
    imported_tables: dict[str, ast.Dict] = field(default_factory=dict)  # dicts of templates (`PROMPTS`)
    template_constants: list[tuple[str, ast.Constant]] = field(default_factory=list)  # module-level
    # Templates chosen by a conditional (`EN if ... else ZH`): the variant read -> the other, same slots.
    variants: dict[ast.expr, ast.Constant] = field(default_factory=dict)
    all_functions: list | None = None  # every (function, class or None), read once (`reader.functions_of`)
    # Dotted names already resolved, by node (None while the imports are still being collected).
    qualnames: dict[ast.expr, str | None] | None = None

    @property
    def lines(self) -> list[str]:
        """The source's lines (`str.splitlines`), split again where a lean project dropped them."""
        if self.held_lines is None:
            store, packed = self.bodies  # compressed (`bodies.Bodies.release`)
            self.held_lines = (store.text(packed)[0] if store else zlib.decompress(packed).decode()).splitlines()
        return self.held_lines

    def own_fillings(self, text: str | None, key: str) -> tuple[list[Shape], bool] | None:
        """How the code fills `key` where it formats the template `text` itself (shapes, whether
        per call), here and in the project modules connected to this one by imports; None where it
        never does."""
        tables = self.project.connected(self) if self.project is not None else [self]
        found = [m.text_fillings[text or ""][key] for m in tables if key in m.text_fillings.get(text or "", {})]
        if not found:
            return None
        shapes = [shape for group in found for shape in group]
        return shapes, any((text, key) in m.text_call_filled for m in tables)

    def unseeded(self, call: str) -> str:
        """KV203's label for a draw by `call`: unseeded, or drawn anew on each call despite a global seed."""
        if self.seed_call:
            return f"`{call}` (each call draws anew after the global `{self.seed_call}`)"
        return f"unseeded `{call}`"

    def is_shown(self, name: str) -> bool:
        """Whether the module only prints, writes or logs `name` (`shown_only`), remembered."""
        if name not in self.shown:
            self.shown[name] = shown_only(self.lines, name)
        return self.shown[name]

    def is_hot(self, first: int, last: int) -> bool:
        """Whether any line in `first..last` (1-based) may hold part of a prompt site."""
        hot = self.hot_lines
        if not hot:
            return True
        return hot.find(1, max(first, 1), min(last, len(hot) - 1) + 1) >= 0

    def qualname(self, node: ast.expr) -> str | None:
        """`np.random.shuffle` -> "numpy.random.shuffle", resolving this module's imports;
        None for anything but a dotted name."""
        if isinstance(node, ast.Name):
            return self.imports.get(node.id, node.id)
        memo = self.qualnames
        if memo is not None and node in memo:
            return memo[node]
        parts: list[str] = []
        start = node
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        qual = None
        if isinstance(node, ast.Name):
            parts.append(self.imports.get(node.id, node.id))
            qual = ".".join(reversed(parts))
        if memo is not None:
            memo[start] = qual
        return qual


@dataclass
class Scope:
    """The values of one function's local names, updated statement by statement."""

    values: dict[str, Shape] = field(default_factory=dict)
    lists: dict[str, ListValue] = field(default_factory=dict)
    literals: dict[str, str] = field(default_factory=dict)
    literal_nodes: dict[str, ast.expr] = field(default_factory=dict)
    rngs: dict[str, bool] = field(default_factory=dict)  # random.Random objects: name -> seeded
    prompts: set[str] = field(default_factory=set)  # names bound to a radixgate Prompt
    exprs: dict[str, ast.expr] = field(default_factory=dict)  # name -> the dict/call bound to it
    is_module: bool = False
    in_loop: bool = False
    depth: int = 0  # how many conditional blocks (if, for, while, try) enclose the statement
    cls: str | None = None  # the class whose method is being read
    params: dict[str, ParamRef] = field(default_factory=dict)  # parameter name -> its reference

    def child(self) -> Scope:
        """A scope for a comprehension: reads see the parent's names, writes stay local."""
        return Scope(
            dict(self.values),
            dict(self.lists),
            dict(self.literals),
            dict(self.literal_nodes),
            dict(self.rngs),
            set(self.prompts),
            dict(self.exprs),
            self.is_module,
            self.in_loop,
            self.depth,
            self.cls,
            self.params,
        )


def dotted(node: ast.expr) -> str | None:
    """`request.user.id` -> "request.user.id"; `data["question"]` -> "data.question"."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                parts.append(key.value)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            break
        else:
            return None
    parts = [p for p in parts if p not in ("self", "cls")]
    return ".".join(reversed(parts)) if parts else None


def functions_in(
    body: list[ast.stmt], cls: str | None
) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]]:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield stmt, cls
            yield from functions_in(stmt.body, None)
        elif isinstance(stmt, ast.ClassDef):
            yield from functions_in(stmt.body, stmt.name)
        elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
            yield from functions_in(stmt.body, cls)


def is_text_building(node: ast.expr) -> bool:
    """An f-string, a concatenation or a `.format` call: text assembled from parts."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "join")


def constant_index(node: ast.expr) -> int | None:
    """The position of `x.insert(k, ...)` when `k` is a literal integer."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None


#: Calls that show or store text rather than send it: the terminal, a file, a log, a page.
_DISPLAY = re.compile(
    r"(?<![\w.])(?:print|echo|secho|pprint)\s*\(|\.(?:write|write_text|writelines|info|debug|warning|error|"
    r"exception|markdown|echo|print|log)\s*\("
)


def shown_only(lines: list[str], name: str) -> bool:
    """Whether every line of the module reading `name` (other than rebinding it) passes it to a call that
    prints, writes or logs it: text never sent to a model (a generated `setup.py`, a terminal banner)."""
    used = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
    bound = re.compile(rf"^\s*{re.escape(name)}\s*(?::[^=]*)?[+]?=(?!=)")
    uses = [line for line in lines if name in line and used.search(line) and not bound.match(line)]
    return bool(uses) and all(_DISPLAY.search(line) for line in uses)
