"""Function bodies held only while they are read, so that a large group of modules linked by imports
does not keep every parsed tree alive at once.

Once a module is added to a lean project (`release`), each of its functions keeps its name, its
parameters' names and its place, dropping its body, decorators, annotations and defaults, and each
class keeps only its methods: what the module's top level and the project's tables read. Its source is
held compressed from then on (zlib's fastest level: about a quarter of its UTF-8), the last few texts
read kept unpacked with their line offsets (`Bodies.text`: a module's walk reads its own bodies one
after another). A body is parsed again from the function's own lines when it is read (`body`: its
module's walk, or another module asking what it returns), then dropped again when that module's walk
is over (`drop_read`).
The lines are the same text at the same place, so the statements parsed are the same, at the same
rows and columns. The top-level statements go once every module's top level is read and linked
(`drop_top_levels`). A call noted for the wrappers keeps only what a site at it reads (`callee_only`,
`placed`), and only while it may still reach one (`NotedCalls`; any project).
"""

from __future__ import annotations

import ast
import itertools
import re
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from .scope import Elsewhere, ParamRef
from .shape import Shape

Function = ast.FunctionDef | ast.AsyncFunctionDef

_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line ends Python's tokenizer counts (not `str.splitlines`'s)
_NONE: list = []  # the one empty list of every dropped decorator list and class base list (never added to)
_UNPACKED = 4  # texts kept unpacked: the module walked, and the few whose functions it asks about


class Bodies:
    """A lean project's dropped bodies: each module's source (compressed), and the bodies parsed again
    since the last `drop_read`."""

    def __init__(self) -> None:
        self.read: list[tuple[Any, Function]] = []  # (module, function) parsed again since `drop_read`
        # id(packed source) -> its text and each line's offset (4 bytes), the most recently read last
        self.unpacked: OrderedDict[int, tuple[str, array[int]]] = OrderedDict()
        self.signatures: dict[tuple[tuple[str, ...], ...], ast.arguments] = {}  # one node per list of names
        self.params: dict[str, ast.arg] = {}  # one node per parameter name

    def text(self, packed: bytes) -> tuple[str, array[int]]:
        """The source `packed` holds (`release`) and each of its lines' offsets, unpacked once while read."""
        key = id(packed)  # packed sources live as long as their store
        if key in self.unpacked:
            self.unpacked.move_to_end(key)
            return self.unpacked[key]
        source = unpack(packed)
        self.unpacked[key] = (source, array("I", itertools.chain((0,), map(re.Match.end, _NEWLINE.finditer(source)))))
        if len(self.unpacked) > _UNPACKED:
            self.unpacked.popitem(last=False)
        return self.unpacked[key]

    def release(self, module: Any, source: str, functions: list[tuple[Function, str | None]]) -> None:
        """Drop the bodies of `functions` (every function of `module`, nested ones included) and the
        statements of its classes other than their methods."""
        module.bodies = (self, zlib.compress(source.encode(), 1))
        module.held_lines = None  # split again when read (`Module.lines`)
        for fn, _ in functions:  # the analysis reads a signature's parameter names and its place only
            fn.body, fn.decorator_list, fn.returns = [], _NONE, None
            fn.args = self.names_only(fn.args)
        for cls in module.classes.values():  # its bases were read when its facts were collected
            cls.body = [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
            cls.bases, cls.keywords, cls.decorator_list = _NONE, _NONE, _NONE

    def names_only(self, args: ast.arguments) -> ast.arguments:
        """`args` as `reader.parameters` reads it: the names of the parameters other than a positional
        `self` or `cls` (left out there too), without their positions, annotations or defaults; one
        node for every signature with the same names (nothing changes a signature once it is read)."""
        skip = ("self", "cls")
        key = (
            tuple(a.arg for a in args.posonlyargs if a.arg not in skip),
            tuple(a.arg for a in args.args if a.arg not in skip),
            tuple(a.arg for a in args.kwonlyargs),
        )
        if key not in self.signatures:
            posonly, positional, kwonly = ([self.param(name) for name in names] for names in key)
            kept = {"posonlyargs": posonly, "args": positional, "kwonlyargs": kwonly}
            self.signatures[key] = ast.arguments(**kept, vararg=None, kwarg=None, kw_defaults=[], defaults=[])
        return self.signatures[key]

    def param(self, name: str) -> ast.arg:
        if name not in self.params:
            self.params[name] = ast.arg(arg=name)
        return self.params[name]

    def drop_top_levels(self, entries: list[Any]) -> None:
        """Drop the top-level statements of the modules whose top level has been read (what they
        define is held in their module's facts; only the text is searched again, for suppressions)."""
        for entry in entries:
            if entry.walker is not None:
                entry.parsed.tree.body = []

    def drop_read(self, walked: Any) -> None:
        """Drop again the bodies parsed since the last call (`walked`: the module just read), and the
        dotted names remembered by node (`Module.qualname`'s memo, which would hold those nodes)."""
        walked.qualnames, walked.held_lines = {}, None
        for module, fn in self.read:
            fn.body = []
            module.qualnames, module.held_lines = {}, None
        self.read.clear()


def body(module: Any, fn: Function) -> list[ast.stmt]:
    """`fn.body`, parsed again from its module's source when it was dropped (`Bodies.release`)."""
    if fn.body or module.bodies is None:
        return fn.body
    store, packed = module.bodies
    source, starts = store.text(packed)
    fn.body = _parse_body(source, starts, fn)
    store.read.append((module, fn))
    return fn.body


def unpack(packed: bytes) -> str:
    """The source a lean project holds compressed (`Bodies.release`)."""
    return zlib.decompress(packed).decode()


def source_text(parsed: Any) -> str:
    """A parsed file's source: `parsed.source`, or what a lean project holds in its place (`release`)."""
    bodies = parsed.module.bodies
    return parsed.source if bodies is None else bodies[0].text(bodies[1])[0] if bodies[0] else unpack(bodies[1])


def _parse_body(source: str, starts: array[int], fn: Function) -> list[ast.stmt]:
    """The body of the function at `fn`'s place in `source`: its lines parsed alone (behind blank
    lines and, when indented, an `if 1:`, so that rows and columns stay), else the whole source."""
    first, last = fn.lineno, fn.end_lineno or fn.lineno
    text = source[starts[first - 1] : starts[last] if last < len(starts) else len(source)]
    head = "\n" * (first - 1) if fn.col_offset == 0 else "\n" * (first - 2) + "if 1:\n"
    found: ast.AST | None = None
    try:
        tree = ast.parse(head + text)
        found = tree.body[0] if fn.col_offset == 0 else getattr(tree.body[0], "body", [None])[0]
    except (SyntaxError, ValueError, IndexError):
        pass
    if not _same_place(found, fn):
        found = next((n for n in ast.walk(ast.parse(source)) if _same_place(n, fn)), None)
    assert isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef)), fn.name
    return found.body


def _same_place(node: ast.AST | None, fn: Function) -> bool:
    return (
        node.__class__ is fn.__class__
        and getattr(node, "name", None) == fn.name
        and (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)
        == (fn.lineno, fn.col_offset, fn.end_lineno, fn.end_col_offset)
    )


_LOAD = ast.Load()  # one context for every copy, as the parser shares one
_PLACE = ("lineno", "col_offset", "end_lineno", "end_col_offset", "holder_end", "value")


def placed(shape: Shape) -> Shape:
    """`shape` as a call noted for the wrappers keeps it: each part's node (and each flaw's) reduced to
    what a finding at it reads, its place and a constant's value, in a node of the same class, so that
    the argument's tree is not held for the rest of the analysis (parameter references kept whole)."""
    return tuple(
        p._replace(node=_place_of(p.node), flaws=tuple(f._replace(node=_place_of(f.node)) for f in p.flaws))
        for p in shape
    )


def _place_of(node: Any) -> Any:
    if node is None or isinstance(node, (ParamRef, Elsewhere)) or not isinstance(node, ast.AST):
        return node
    spot = node.__class__()
    held = node.__dict__
    for name in _PLACE:
        if name in held:
            setattr(spot, name, held[name])
    return spot


def callee_only(node: ast.Call) -> ast.Call:
    """What a call noted for the project's wrappers keeps of its node once its arguments are read: the
    callee's dotted name (what `sinks.chain` and `sinks.is_template_call` read of it), at the call's
    place (neither its arguments' trees nor its callee's are held for the rest of the analysis)."""
    return ast.copy_location(ast.Call(func=_dotted_only(node.func), args=[], keywords=[]), node)


def _dotted_only(func: ast.expr) -> ast.expr:
    """`func`'s attribute names down to its root name; a root of another kind left as a bare node of its class."""
    if isinstance(func, ast.Attribute):
        return ast.Attribute(value=_dotted_only(func.value), attr=func.attr, ctx=_LOAD)
    return ast.Name(id=func.id, ctx=_LOAD) if isinstance(func, ast.Name) else func.__class__()


Key = tuple[str, str | None, str]  # (module, class or None, function)
_SWEEP_EVERY = 1000  # calls noted between two sweeps at least (at least as many as the last one kept)


class NotedCalls:
    """The calls noted for the project's wrappers (`Project.note_call`), let go during the walk once
    none of the functions they may reach can ever become a wrapper: most never do, and each holds its
    arguments' shapes.

    A function `f` becomes a wrapper only by a site holding a reference to one of its parameters
    (`Project.learn`). Such references are made only while `f`'s own module is walked; after that they
    live on only in what that walk left: its module's sites (learned at once), its module's tables
    (fillings, attribute values, returns, constants: what a later walk of another module may read),
    and the arguments of the calls noted inside `f` (a call that reaches a wrapper is a site holding
    them). So once `f`'s module is walked, `f` is *dead* when it is not a wrapper, no reference to its
    parameters is left in its module's tables, and every noted call carrying such a reference is dead,
    a call being dead when each function it may reach is. A dead function stays dead and a dead call
    never becomes a site: dropping dead calls changes no finding."""

    def __init__(self) -> None:
        self.walked: list[Any] = []  # modules walked since the last sweep (their tables not yet read)
        self.escaped: set[Key] = set()  # functions whose parameters a walked module's tables refer to
        self.kept = 0  # calls held after the last sweep

    def after_walk(self, project: Any, module: Any) -> None:
        """`module`'s walk is over and its sites learned: sweep once enough calls were noted since the last."""
        self.walked.append(module)
        if len(project.calls) - self.kept >= max(_SWEEP_EVERY, self.kept):  # each sweep's cost paid back
            self.sweep(project)

    def sweep(self, project: Any) -> None:
        """Drop the dead calls from `project.calls`, keeping the others in order."""
        for module in self.walked:
            self.escaped.update(_referred(_table_shapes(module)))
        self.walked.clear()
        unwalked = {entry.parsed.module.name for entry in project.entries if entry.walker is not None}
        calls = project.calls
        reaching: dict[Key, list[int]] = {}  # function -> the calls that may reach it
        for i, call in enumerate(calls):
            for target in call.targets:
                reaching.setdefault(target, []).append(i)
        todo = [key for key in reaching if key in project.wrappers or key in self.escaped or key[0] in unwalked]
        live_keys, live_calls = set(todo), set()
        while todo:  # a live function's calls are live, and so are the functions whose parameters they carry
            for i in reaching.get(todo.pop(), ()):
                if i not in live_calls:
                    live_calls.add(i)
                    for key in _referred(_argument_shapes(calls[i])):
                        if key not in live_keys:
                            live_keys.add(key)
                            todo.append(key)
        project.calls = [call for i, call in enumerate(calls) if i in live_calls]
        self.kept = len(project.calls)


def _referred(shapes: Iterator[Shape]) -> set[Key]:
    """The functions whose parameters the parts of `shapes` refer to."""
    return {part.node.fn for shape in shapes for part in shape if isinstance(part.node, ParamRef)}


def _argument_shapes(call: Any) -> Iterator[Shape]:
    yield from call.args
    yield from call.kwargs.values()
    yield from call.templates.values()
    for segments in call.messages.values():
        yield from (segment.shape for segment in segments)


def _table_shapes(module: Any) -> Iterator[Shape]:
    """Every shape a module's tables hold (what another module's walk may read later)."""
    for shapes in module.fillings.values():
        yield from shapes
    for by_key in module.text_fillings.values():
        for shapes in by_key.values():
            yield from shapes
    yield from module.attr_shapes.values()
    yield from module.returns.values()
    yield from module.constants.values()
    yield from module.imported_constants.values()
