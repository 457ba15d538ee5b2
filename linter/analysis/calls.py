"""The evaluator, its call cases: what a call returns (taint sources, sanitizers, string methods,
template objects, the module's own functions); the expression cases are `ExpressionEvaluator`'s."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..rules import DirectoryOrder, UnorderedIteration, UnseededShuffle, UnsortedJsonDumps
from . import names
from .expressions import ExpressionEvaluator
from .placeholders import as_format_string
from .scope import Module, Scope, dotted
from .shape import Change, Flaw, Kind, Part, Shape, derive, moved, text, unknown, value, with_flaw, without_flaws

#: Reads a function's body for the shape it returns (`walker.read_function`): the walker reads
#: statements with an evaluator, so the evaluator is handed the walker's reader, never imports it.
ReadFunction = Callable[["Evaluator", ast.FunctionDef | ast.AsyncFunctionDef, "str | None"], Shape]

_SORT_SANITIZED = frozenset({UnorderedIteration.code, UnseededShuffle.code, DirectoryOrder.code})
_KEY_ORDER = frozenset({UnsortedJsonDumps.code, UnorderedIteration.code})  # what sort_keys fixes
_PASS_THROUGH = frozenset(
    {
        "str",
        "repr",
        "format",
        "ascii",
        "list",
        "tuple",
        "reversed",
        "textwrap.dedent",
        "inspect.cleandoc",
        "textwrap.indent",
        "enumerate",
        "iter",
    }
)
_SCALAR = frozenset(
    {
        "len",
        "bool",
        "any",
        "all",
        "sum",
        "min",
        "max",
        "isinstance",
        "hash",
        "id",
        "type",
        "callable",
        "hasattr",
    }
)
#: Numeric conversions keep what their argument is: `round(time.time() - start)` still reads the clock.
_NUMERIC = frozenset({"int", "float", "round", "abs", "math.floor", "math.ceil"})
_READ_METHODS = frozenset({"read", "read_text", "readlines", "read_bytes"})
_TOOLISH = frozenset(
    {
        "tool",
        "tools",
        "schema",
        "schemas",
        "function",
        "functions",
        "spec",
        "specs",
        "parameters",
        "definitions",
        "signatures",
    }
)


def _kwarg(node: ast.Call, name: str) -> ast.expr | None:
    for kw in node.keywords:
        if kw.arg == name:
            return kw.value
    return None


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(node.value)


def _replaced(shape: Shape, marker: str, by: Shape) -> Shape | None:
    """`shape` with `by` in place of each `marker` in its known static text; None when no known
    text holds the marker and `by` is not static text."""
    out: list[Part] = []
    hit = False
    for p in shape:
        if p.kind is Kind.TEXT and not p.flaws and len(p.label) == p.chars and marker in p.label:
            hit = True
            for i, piece in enumerate(p.label.split(marker)):
                if i:
                    out.extend(by)
                out.extend(text(len(piece), p.node, piece))
        else:
            out.append(p)
    if hit or all(p.kind is Kind.TEXT and not p.flaws for p in by):  # `.replace("\n", " ")` keeps the shape
        return tuple(out)
    return None


def _picked_value(seeded: bool, node: ast.Call) -> Shape:
    return unknown(node, "seeded random") if seeded else value(Kind.RANDOM, Change.PER_REQUEST, node, "a random value")


def _rng_seeded(receiver: ast.expr, scope: Scope) -> bool | None:
    """Whether `receiver` is a seeded random generator; None when it is not a known one."""
    if isinstance(receiver, ast.Name) and receiver.id in scope.rngs:
        return scope.rngs[receiver.id]
    return None


def _is_toolish(node: ast.expr) -> bool:
    """A tool or schema dict, by its name (`tools`, `function_specs`): assembled from parts."""
    label = dotted(node) or ""
    return bool(set(names.words(label)) & _TOOLISH)


class Evaluator(ExpressionEvaluator):
    """Turns expressions into shapes within one module: the expression cases it inherits, and here
    the call cases. `read_function` reads a function of the module for what it returns."""

    def __init__(self, module: Module, read_function: ReadFunction) -> None:
        super().__init__(module)
        self.read_function = read_function

    def call(self, node: ast.Call, scope: Scope, hint: str | None) -> Shape:
        """The shape of the value `node` returns."""
        qual = self.module.qualname(node.func)
        arg0 = node.args[0] if node.args else None
        if qual in names.TIME_CALLS:
            return self._time_call(node, qual, scope)
        if qual is not None:
            if names.matches(qual, names.ID_CALLS):
                return value(Kind.ID, Change.PER_REQUEST, node, qual + "()")
            if names.matches(qual, names.RANDOM_VALUE_CALLS):
                return _picked_value(self.module.is_random_seeded and scope.is_module, node)
            if names.matches(qual, names.RANDOM_PICK_CALLS):
                picked = derive(self.shape(arg0, scope), node) if arg0 is not None else unknown(node)
                if self.module.is_random_seeded and scope.is_module:  # drawn once at import, the same everywhere
                    return picked
                return with_flaw(picked, Flaw(UnseededShuffle.code, node, self.module.unseeded(qual)))
            if names.matches(qual, names.PROCESS_CALLS):
                return value(Kind.ID, Change.PER_PROCESS, node, qual + "()")
            if names.matches(qual, names.LISTDIR_CALLS):
                return with_flaw(unknown(node, qual + "()"), Flaw(DirectoryOrder.code, node, f"`{qual}()`"))
            if qual == "sorted" and arg0 is not None:
                return without_flaws(self.element(arg0, scope), _SORT_SANITIZED)
            if qual in ("json.dumps", "orjson.dumps") and arg0 is not None:
                inner = self.shape(arg0, scope)
                if _is_true(_kwarg(node, "sort_keys")) or qual == "orjson.dumps":
                    return without_flaws(derive(inner, node), _KEY_ORDER)
                if names.is_literal_data(arg0) or not _is_toolish(arg0) or names.has_fixed_order(arg0, scope.exprs):
                    return derive(inner, node)  # only tool and schema dicts are assembled from parts
                label = "`json.dumps` without `sort_keys=True`"
                return with_flaw(inner, Flaw(UnsortedJsonDumps.code, node, label, always=True))
            if qual in ("set", "frozenset") and arg0 is not None:
                flaw = Flaw(UnorderedIteration.code, node, f"`{qual}(...)`")
                return with_flaw(self.element(arg0, scope), flaw)
            if qual in ("open", "pathlib.Path.read_text"):
                return derive(self.shape(arg0, scope), node) if arg0 is not None else unknown(node)
            if qual in _SCALAR:
                return text(1, node)
            if qual in _NUMERIC and arg0 is not None:
                inner = self.shape(arg0, scope)
                return derive(inner, node) if any(p.kind is not Kind.TEXT for p in inner) else text(1, node)
            if qual in _PASS_THROUGH and arg0 is not None:
                return self.shape(arg0, scope)
            if qual in self.module.functions:
                return self.function_return(qual, node)
            if self.module.project is not None and "." in qual:
                shaped = self.module.project.function_return(self, node, qual)
                if shaped is not None:
                    return shaped
        if scope.cls and isinstance(node.func, ast.Attribute) and names.is_self(node.func.value):
            fn = self._method(scope.cls, node.func.attr)
            if fn is not None:  # `self.header()`: what the class's own method returns, reported at this call
                shape = self.function_return(f"{scope.cls}.{fn.name}", node, fn, scope.cls)
                return tuple(p if p.kind is Kind.TEXT else moved(p, node) for p in shape)
        if isinstance(node.func, ast.Attribute):
            shaped = self._method_call(node, node.func.attr, scope, hint)
            if shaped is not None:
                return shaped
        return self._generic(node, scope, hint)

    def _time_call(self, node: ast.Call, qual: str, scope: Scope) -> Shape:
        if qual in names.RELATIVE_TO_NOW:
            return value(Kind.TIME, names.TIME_CALLS[qual], node, qual + "()")
        position = names.EXPLICIT_TIME_ARG.get(qual)
        if position is not None and len(node.args) > position:
            return derive(self.shape(node.args[position], scope), node)
        change = names.TIME_CALLS[qual]
        if qual == "time.strftime" and node.args and isinstance(node.args[0], ast.Constant):
            change = names.strftime_change(str(node.args[0].value))
        return value(Kind.TIME, change, node, qual.rsplit(".", 2)[-2] + "." + qual.rsplit(".", 1)[-1] + "()")

    def _method_call(self, node: ast.Call, attr: str, scope: Scope, hint: str | None) -> Shape | None:
        """Shapes of method calls that promptlint understands; None for the rest."""
        receiver = node.func.value  # type: ignore[attr-defined]
        if attr == "format_map" and len(node.args) == 1 and isinstance(node.args[0], ast.Dict):
            found = self.literal(receiver, scope)  # `T.format_map({"date": ...})` fills as `T.format(date=...)`
            if found is not None:
                mapping = node.args[0]
                kwargs = {
                    k.value: self.shape(v, scope)
                    for k, v in zip(mapping.keys, mapping.values, strict=False)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                }
                return self.fill(found[0], found[1], [], kwargs)
        if attr == "replace" and len(node.args) == 2 and _is_text(node.args[0]):
            # `TEMPLATE.replace("{date}", today)`: the value goes where its marker was.
            shaped = _replaced(self.shape(receiver, scope), node.args[0].value, self.shape(node.args[1], scope))  # type: ignore[attr-defined]
            if shaped is not None:
                return shaped
        if attr in ("render", "substitute", "safe_substitute"):
            held = self._template_object(receiver, scope)
            if held is not None:  # `jinja2.Template(T).render(now=...)`, `string.Template(T).substitute(...)`
                kwargs = {kw.arg: self.shape(kw.value, scope) for kw in node.keywords if kw.arg}
                if node.args and isinstance(node.args[0], ast.Dict):
                    pairs = zip(node.args[0].keys, node.args[0].values, strict=False)
                    kwargs |= {str(k.value): self.shape(v, scope) for k, v in pairs if isinstance(k, ast.Constant)}
                return self.fill(as_format_string(held[0], held[2]), held[1], [], kwargs)
        if attr == "format":
            found = self.literal(receiver, scope)
            if found is not None:
                args = [self.shape(a, scope) for a in node.args if not isinstance(a, ast.Starred)]
                kwargs = {kw.arg: self.shape(kw.value, scope) for kw in node.keywords if kw.arg}
                spread = [kw.value for kw in node.keywords if kw.arg is None]
                return (
                    self.fill(found[0], found[1], args, kwargs, fallback=True)
                    if not spread
                    else self.fill(found[0], found[1], args, kwargs)
                )
        if attr == "join" and node.args:
            sep = self.shape(receiver, scope)
            arg, width = node.args[0], sum(p.chars for p in sep)
            # A known list keeps its order: each element stays in place.
            if isinstance(arg, (ast.List, ast.Tuple)):
                return self.sequence(arg.elts, scope, width)
            if isinstance(arg, ast.Name) and arg.id in scope.lists and not scope.lists[arg.id].flaws:
                return self.list_shape(scope.lists[arg.id], scope, width)
            items = self.element(node.args[0], scope)
            if isinstance(node.args[0], ast.Name):  # report unordered names where `sorted()` goes
                items = tuple(
                    p._replace(
                        flaws=tuple(
                            f._replace(node=node.args[0]) if f.code == UnorderedIteration.code else f for f in p.flaws
                        )
                    )
                    for p in items
                )
            return derive(items, node, None) if not sep else derive(items + sep, node, None)
        if attr in ("strftime",):
            recv = self.shape(receiver, scope)
            if recv and any(p.kind is Kind.TIME and p.change >= Change.PER_DAY for p in recv):
                fmt = node.args[0] if node.args else None
                change = (
                    names.strftime_change(fmt.value)
                    if isinstance(fmt, ast.Constant) and isinstance(fmt.value, str)
                    else Change.PER_REQUEST
                )
                change = min(change, max(p.change for p in recv))
                return value(Kind.TIME, change, node, "strftime()")
            return derive(recv, node)
        if attr == "date":
            recv = self.shape(receiver, scope)
            if recv and recv[0].kind is Kind.TIME:
                return value(Kind.TIME, min(recv[0].change, Change.PER_DAY), node, "date()")
        if attr in (
            "strip",
            "lstrip",
            "rstrip",
            "upper",
            "lower",
            "title",
            "capitalize",
            "casefold",
            "isoformat",
            "ctime",
            "timestamp",
            "hex",
        ):
            return self.shape(receiver, scope)
        if attr in names.CLOCK_METHODS:
            return value(Kind.TIME, Change.PER_REQUEST, node, f"{attr}()")
        if attr in names.RETRIEVAL_METHODS:
            return value(Kind.DOC, Change.PER_REQUEST, node, f"{attr}() results")
        if attr in _READ_METHODS:
            flaws = tuple(f for p in self.shape(receiver, scope) for f in p.flaws)
            return (Part(Kind.DOC, Change.NEVER, 0, node, hint or "file contents", flaws),)
        if attr in names.LISTDIR_METHODS and not (self.module.qualname(node.func) or "").startswith("glob."):
            return with_flaw(unknown(node, attr + "()"), Flaw(DirectoryOrder.code, node, f"`.{attr}()`"))
        seeded = _rng_seeded(receiver, scope)
        if seeded is not None and attr in ("sample", "choice", "choices", "permutation"):
            picked = derive(self.shape(node.args[0], scope), node) if node.args else unknown(node)
            if seeded:
                return picked
            return with_flaw(picked, Flaw(UnseededShuffle.code, node, self.module.unseeded(attr)))
        if seeded is not None:
            return _picked_value(seeded, node)
        return None

    def _template_object(self, node: ast.expr, scope: Scope) -> tuple[str, ast.expr, str] | None:
        """The text, holder and style of a Jinja or `string.Template` object `node` (built inline, or
        bound to a local, a module name or `self.x`), when its text is literal."""
        built: ast.expr | None = node
        if isinstance(node, ast.Name):
            built = scope.exprs.get(node.id) or self.module.exprs.get(node.id)
        elif isinstance(node, ast.Attribute) and scope.cls and names.is_self(node.value):
            built = self.module.attr_exprs.get((scope.cls, node.attr))
        if not isinstance(built, ast.Call) or not built.args:
            return None
        qual = self.module.qualname(built.func) or ""
        style = "dollar" if qual == "string.Template" else "jinja" if qual.startswith("jinja2.") else None
        if isinstance(built.func, ast.Attribute) and built.func.attr == "from_string":
            style = "jinja"
        found = self.literal(built.args[0], scope) if style else None
        return (found[0], found[1], style) if found is not None and style else None

    def _generic(self, node: ast.Call, scope: Scope, hint: str | None) -> Shape:
        """A call promptlint knows nothing about: its name, the name it is assigned to, then its
        arguments decide what it returns."""
        func_name = (
            node.func.attr
            if isinstance(node.func, ast.Attribute)
            else node.func.id
            if isinstance(node.func, ast.Name)
            else None
        )
        key = None
        if (
            func_name in ("get", "pop", "getlist", "get_json")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            key = node.args[0].value  # `data.get("history")` is named by its key
        for label in (key, func_name, hint):
            if label and names.classify_name(label.removeprefix("get_")) is not None:
                return self.by_name(label.removeprefix("get_"), node)
        inputs: list = []
        if isinstance(node.func, ast.Attribute):
            inputs.extend(self.shape(node.func.value, scope))
        for arg in list(node.args) + [kw.value for kw in node.keywords]:
            inputs.extend(self.shape(arg, scope))
        if any(p.is_dynamic or p.kind is Kind.DOC or p.flaws for p in inputs):
            return derive(tuple(p for p in inputs if p.kind is not Kind.TEXT or p.flaws), node)
        return unknown(node, func_name or "call")

    def function_return(
        self,
        name: str,
        node: ast.Call,
        fn: ast.FunctionDef | ast.AsyncFunctionDef | None = None,
        cls: str | None = None,
    ) -> Shape:
        """The shape a function of this module (or a method of class `cls`, keyed `Class.method`)
        returns, its parameters unknown, computed once."""
        module = self.module
        if name in module.returns:
            shape = module.returns[name]
        elif name in module.in_progress:
            return unknown(node, name)
        else:
            module.in_progress.add(name)
            shape = self.read_function(self, fn or module.functions[name], cls)
            module.in_progress.discard(name)
            module.returns[name] = shape
        return shape

    def _method(self, cls: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        found = self.module.classes.get(cls)
        for stmt in found.body if found is not None else []:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return stmt
        return None
