"""The expression cases of the evaluator: f-strings, `+`, `%`, `str.format`, `"".join`, module
constants, local names, attributes, comprehensions and templates' placeholders. What a call returns is
the other half of the evaluator (`calls.Evaluator`)."""

from __future__ import annotations

import ast
import re
from abc import ABC, abstractmethod

from ..rules import UnorderedIteration
from . import names
from .placeholders import at_placeholder, locate, placeholders, same_slots
from .scope import ListValue, Module, ParamRef, Scope, dotted
from .shape import EMPTY, Change, Flaw, Kind, Shape, derive, flaws_of, moved, text, unknown, value, with_flaw

_PERCENT = re.compile(r"%(?:\((\w+)\))?[-#0 +]*\d*(?:\.\d+)?[sdrifxXeEgGc]")
_JOINABLE_SEP = 1
#: String methods whose result has the shape of the string they are called on.
SAME_SHAPE_METHODS = frozenset(
    {"strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize", "casefold", "expandtabs", "encode", "decode"}
)


class ExpressionEvaluator(ABC):
    """Turns expressions into shapes within one module; `call` (what a call returns) is the
    subclass's, `calls.Evaluator`, the one the checker uses."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self._expanding: set[int] = set()  # lists being expanded (`x.append(f(x))` is a loop)
        self._attr_busy: set[tuple[str, str]] = set()  # attributes being evaluated (no cycles)
        self.defining = False  # reading a template constant where it is defined
        self.template_text: str | None = None  # the text of the template constant being read

    def list_shape(self, lst: ListValue, scope: Scope, sep: int) -> Shape:
        """The elements of a built-up list in order, or nothing when it contains itself."""
        if id(lst) in self._expanding:
            return EMPTY
        self._expanding.add(id(lst))
        try:
            return self.sequence(lst.elements, scope, sep)
        finally:
            self._expanding.discard(id(lst))

    # -- names ---------------------------------------------------------------------------
    def by_name(self, label: str, node: ast.AST | None) -> Shape:
        found = names.classify_name(label)
        if found is None:
            return unknown(node, label)
        return value(found[0], found[1], node, label)

    def literal(self, node: ast.expr, scope: Scope) -> tuple[str, ast.expr] | None:
        """The literal text of `node` and the node that holds it, when it is known statically."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value, node
        if isinstance(node, ast.Name):
            if node.id in scope.literals:
                return scope.literals[node.id], scope.literal_nodes[node.id]
            if node.id in scope.values or node.id in scope.params:
                return None
            if node.id in self.module.literals:
                return self.module.literals[node.id], self.module.literal_nodes[node.id]
            if node.id in self.module.imported_literals:  # a template from another module: report here
                return self.module.imported_literals[node.id], node
        if isinstance(node, ast.Attribute) and scope.cls and names.is_self(node.value):
            return self.module.attr_literals.get((scope.cls, node.attr))
        imported = self.module.imported_literals
        if imported and isinstance(node, ast.Attribute) and (held := imported.get(dotted(node) or "")):
            return held, node  # `prompts.QA`, QA a template of the project's module `prompts`
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # `header + template`
            left, right = self.literal(node.left, scope), self.literal(node.right, scope)
            if left is not None and right is not None:
                return left[0] + right[0], node
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and (again := names.repeated(node)):
            found = self.literal(again[0], scope)  # `"..." * 10`: static text repeated
            return (found[0] * again[1], node) if found is not None else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            table = scope.exprs.get(node.value.id, self.module.exprs.get(node.value.id))
            if isinstance(table, ast.Dict):  # `PROMPTS[version]`: templates kept in a dict
                return self._entry_literal(table, node.slice, scope)
            far = self.module.imported_tables.get(node.value.id)
            if far is not None and (entry := self._entry_literal(far, node.slice, scope)) is not None:
                return entry[0], node  # a table of another module: reported at this use
        if isinstance(node, ast.Call) and not node.keywords:
            joined = self._joined_literal(node, scope)
            if joined is not None:
                return joined, node
            qual = self.module.qualname(node.func)
            if qual in ("textwrap.dedent", "inspect.cleandoc"):
                return self.literal(node.args[0], scope) if node.args else None
            if isinstance(node.func, ast.Attribute) and node.func.attr in SAME_SHAPE_METHODS:
                return self.literal(node.func.value, scope)  # `"""...""".strip()`
        if node.__class__ is ast.IfExp:  # `EN if lang == "en" else ZH`: variants of one prompt, read the first
            first, other = self.literal(node.body, scope), self.literal(node.orelse, scope)
            if first and other and isinstance(other[1], ast.Constant) and same_slots(first[0], other[0]):
                self.module.variants[first[1]] = other[1]  # what is found in the first is reported in both
            return first or other
        return None

    def _entry_literal(self, table: ast.Dict, key: ast.expr, scope: Scope) -> tuple[str, ast.expr] | None:
        """The template a constant key selects; for a key known only at run time (a version, a mode:
        variants of one prompt), the first entry that is literal text."""
        entries = [v for k, v in zip(table.keys, table.values, strict=False) if k is not None]
        if isinstance(key, ast.Constant):
            entries = [
                v
                for k, v in zip(table.keys, table.values, strict=False)
                if isinstance(k, ast.Constant) and k.value == key.value
            ]
        return next((found for v in entries if (found := self.literal(v, scope)) is not None), None)

    def _joined_literal(self, node: ast.Call, scope: Scope) -> str | None:
        """`"\\n".join([HEADER, BODY])` (or a local list of literals) when every piece is literal."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "join" and len(node.args) == 1):
            return None
        if not (isinstance(func.value, ast.Constant) and isinstance(func.value.value, str)):
            return None
        arg = node.args[0]
        if isinstance(arg, (ast.List, ast.Tuple)):
            elements = arg.elts
        elif isinstance(arg, ast.Name) and arg.id in scope.lists:
            elements = scope.lists[arg.id].elements
        else:
            return None
        texts = [self.literal(e, scope) if isinstance(e, ast.expr) else None for e in elements]
        if not texts or any(t is None for t in texts):
            return None
        return func.value.value.join(t[0] for t in texts if t is not None)

    def placeholder(self, field_name: str, node: ast.AST) -> Shape:
        """The value a `{field}` of a template gets when the code that fills it is elsewhere."""
        key = field_name.split(".")[0].split("[")[0]
        own = self.module.own_fillings(self.template_text, key)  # where this very template is formatted
        shapes = own[0] if own else self.module.fillings.get(key, [])
        if not shapes and self.module.project is not None:  # filled in a connected module (never by name alone)
            shapes = [s for m in self.module.project.connected(self.module) for s in m.fillings.get(key, [])]
        dynamic = [s for s in shapes if any(p.is_dynamic for p in s)]
        if dynamic and self.defining:  # a template's own site: the filling call reports this value
            return unknown(node, key)
        if dynamic:
            return at_placeholder(derive(dynamic[0], node), node, key)
        flawed = [s for s in shapes if any(p.flaws for p in s)]
        if flawed:  # KV2xx flaws travel through placeholders as taint does
            return at_placeholder(derive(flawed[0], node), node, key)
        docs = [p for s in shapes for p in s if p.kind is Kind.DOC]
        if docs:
            return value(Kind.DOC, max(p.change for p in docs), node, key)
        if key in self.module.partial_names and shapes and all(p.kind is Kind.TEXT for s in shapes for p in s):
            # `partial_variables={"instructions": LONG}`: a constant bound once is static text of the prompt
            first = shapes[0]
            return text(sum(p.chars for p in first), node, "".join(p.label for p in first))
        if key in self.module.partial_names or key in names.DEPLOYMENT_SLOTS or names.is_setup_slot(key):
            # bound once with a fixed value, or a slot set up once (a constant, the tools, the language)
            return unknown(node, key)
        named = self.by_name(key, node)
        project = self.module.project
        per_call = (
            own[1]
            if own
            else key in self.module.call_filled
            or bool(project and any(key in m.call_filled for m in project.connected(self.module)))
        )
        if named[0].kind is Kind.UNKNOWN and (
            not shapes or per_call or any(isinstance(p.node, ParamRef) for s in shapes for p in s)
        ):
            # A template's input variable is filled per invocation unless the module binds it once.
            return value(Kind.TURN, Change.PER_SESSION, node, key)
        return named

    def fill(
        self, template: str, holder: ast.expr, args: list[Shape], kwargs: dict[str, Shape], fallback: bool = True
    ) -> Shape:
        """The shape of `template.format(*args, **kwargs)`."""
        pieces = placeholders(template)
        if pieces is None:
            return text(len(template), holder)
        out: list = []
        auto = 0
        for lit, fld in pieces:
            out.extend(text(len(lit), holder, lit))
            if fld is None:
                continue
            where = locate(self.module, holder, "{" + fld)
            if fld == "" or fld.isdigit():
                index = auto if fld == "" else int(fld)
                auto += 1
                out.extend(args[index] if index < len(args) else unknown(where, "{}"))
            elif fld.split(".")[0] in kwargs:
                given = kwargs[fld.split(".")[0]]
                if given and all(p.kind is Kind.UNKNOWN and not p.flaws for p in given):
                    # Nothing known about the value: the slot's own name says what it holds.
                    named = self.by_name(fld.split(".")[0].split("[")[0], where)
                    if named[0].kind is not Kind.UNKNOWN:
                        given = named
                out.extend(given)
            else:
                out.extend(self.placeholder(fld, where) if fallback else unknown(where, fld))
        return tuple(out)

    # -- expressions ---------------------------------------------------------------------
    def shape(self, node: ast.expr | None, scope: Scope, hint: str | None = None) -> Shape:
        """The shape of the string `node` evaluates to (`hint`: the name it is assigned to)."""
        if node is None:
            return EMPTY
        cls = node.__class__  # the commonest exact classes first; subclasses take the full chain
        if cls is ast.Name:
            return self.name(node, scope)  # type: ignore[arg-type]
        if cls is ast.Call:
            return self.call(node, scope, hint)  # type: ignore[arg-type]
        if isinstance(node, ast.Constant):
            v = node.value
            return text(len(v), node, v) if isinstance(v, str) else text(len(repr(v)), node)
        if isinstance(node, ast.JoinedStr):
            out: list = []
            for piece in node.values:
                if isinstance(piece, ast.FormattedValue):
                    out.extend(self.shape(piece.value, scope))
                else:
                    out.extend(self.shape(piece, scope))
            return tuple(out)
        if isinstance(node, ast.BinOp):
            return self.binop(node, scope)
        if isinstance(node, ast.Name):
            return self.name(node, scope)
        if isinstance(node, ast.Attribute) and scope.cls and names.is_self(node.value):
            found = self.attribute(scope.cls, node)
            if found is not None:
                return found
        constants = self.module.imported_constants
        if constants and isinstance(node, ast.Attribute) and (held := constants.get(dotted(node) or "")):
            return tuple(moved(p, node) for p in held)  # `settings.SYSTEM`, from the project
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            # `uuid.uuid4().hex[:8]`, `now.hour`, `row["text"]`: what the base is, the part is.
            base = node.value
            if not isinstance(base, ast.Name) or base.id in scope.values or base.id in scope.lists:
                inner = self.shape(base, scope)
                if any(p.kind is not Kind.UNKNOWN or p.flaws for p in inner):
                    return derive(inner, node)
            label = dotted(node)
            return self.by_name(label, node) if label else unknown(node)
        if isinstance(node, ast.Call):
            return self.call(node, scope, hint)
        if isinstance(node, (ast.List, ast.Tuple)):
            return derive(self.sequence(node.elts, scope), node)
        if isinstance(node, ast.Set):
            shape = derive(self.sequence(node.elts, scope), node)
            return with_flaw(shape, Flaw(UnorderedIteration.code, node, "a set literal"))
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            return self.comprehension(node, scope)
        if isinstance(node, ast.IfExp):  # chosen by the test: as dynamic as all three
            return derive(
                self.shape(node.test, scope) + self.shape(node.body, scope) + self.shape(node.orelse, scope), node
            )
        if isinstance(node, ast.Lambda):
            return self.shape(node.body, scope)
        if isinstance(node, (ast.Await, ast.Starred)):
            return self.shape(node.value, scope)
        if isinstance(node, ast.Dict):
            return derive(self.sequence(node.values, scope), node)
        if isinstance(node, ast.BoolOp):  # `a or ""` is `a`
            return derive(tuple(p for v in node.values for p in self.shape(v, scope, hint)), node)
        if isinstance(node, ast.Compare):
            return derive(self.sequence([node.left, *node.comparators], scope), node)
        if isinstance(node, ast.UnaryOp):
            return text(1, node)
        return unknown(node)

    def sequence(self, elements: list[ast.expr], scope: Scope, sep: int = 0) -> Shape:
        out: list = []
        for i, elt in enumerate(elements):
            if i and sep:
                out.extend(text(sep))
            out.extend(self.shape(elt, scope))
        return tuple(out)

    def attribute(self, cls: str, node: ast.Attribute) -> Shape | None:
        """`self.x`: the value a method of `cls` stored (or a class-level field), else None."""
        module = self.module
        key = (cls, node.attr)
        if key in module.attr_shapes:
            shape = module.attr_shapes[key]
        elif key in module.attr_exprs and key not in self._attr_busy:
            self._attr_busy.add(key)
            try:
                shape = self.shape(module.attr_exprs[key], Scope(cls=cls), hint=node.attr)
            finally:
                self._attr_busy.discard(key)
            module.attr_shapes[key] = shape
        else:
            return None
        if len(shape) == 1 and shape[0].kind is not Kind.TEXT and not shape[0].flaws:
            return (moved(shape[0], node),)
        return shape

    def name(self, node: ast.Name, scope: Scope) -> Shape:
        if node.id in scope.params and node.id not in scope.values and node.id not in scope.lists:
            ref = scope.params[node.id]
            use = ParamRef(id=node.id, ctx=ast.Load())
            if hasattr(node, "lineno"):  # `ast.copy_location`, inlined (made-up names have no position)
                use.lineno, use.col_offset = node.lineno, node.col_offset
            use.end_lineno, use.end_col_offset = node.end_lineno, node.end_col_offset
            use.fn, use.index = ref.fn, ref.index
            return self.by_name(node.id, use)
        if node.id in scope.values:
            shape = scope.values[node.id]
            if len(shape) == 1 and shape[0].kind is not Kind.TEXT and not shape[0].flaws:
                return (moved(shape[0], node),)  # report at the use, named by its origin
            return shape
        if node.id in scope.lists:
            lst = scope.lists[node.id]
            elements = self.list_shape(lst, scope, _JOINABLE_SEP)
            shape = derive(elements, node, node.id, lst.flaws)
            return shape if elements else self.by_name(node.id, node)
        if node.id in self.module.constants:
            return self.module.constants[node.id]
        if node.id in self.module.imported_constants:  # reported at this use, not in the other file
            return tuple(moved(p, node) for p in self.module.imported_constants[node.id])
        return self.by_name(node.id, node)

    def binop(self, node: ast.BinOp, scope: Scope) -> Shape:
        if isinstance(node.op, ast.Add):
            return self.shape(node.left, scope) + self.shape(node.right, scope)
        if isinstance(node.op, ast.Mult) and (repeated := names.repeated(node)) is not None:
            if (found := self.literal(node, scope)) is not None:
                return text(len(found[0]), node, found[0])
            part = self.shape(repeated[0], scope)  # a repeated value: as dynamic as the value, longer
            return part * repeated[1] if all(p.kind is Kind.TEXT for p in part) else derive(part, node)
        if isinstance(node.op, ast.Mod):
            found = self.literal(node.left, scope)
            if found is not None:
                return self.percent(found[0], found[1], node.right, scope)
        return derive(self.shape(node.left, scope) + self.shape(node.right, scope), node)

    def percent(self, template: str, holder: ast.expr, right: ast.expr, scope: Scope) -> Shape:
        """`"%s and %(name)s" % args`: static pieces interleaved with the argument shapes."""
        pieces = _PERCENT.split(template)
        args = right.elts if isinstance(right, ast.Tuple) else [right]
        mapping = {}
        if isinstance(right, ast.Dict):
            mapping = {
                k.value: v for k, v in zip(right.keys, right.values, strict=False) if isinstance(k, ast.Constant)
            }
        out: list = []
        position = 0
        for i in range(0, len(pieces), 2):
            out.extend(text(len(pieces[i]), holder, pieces[i]))
            if i + 1 < len(pieces):
                key = pieces[i + 1]
                if key is not None:
                    out.extend(self.shape(mapping[key], scope) if key in mapping else self.by_name(key, holder))
                else:
                    out.extend(self.shape(args[position], scope) if position < len(args) else unknown(holder))
                    position += 1
        return tuple(out)

    def element(self, iterable: ast.expr, scope: Scope) -> Shape:
        """The shape of one item of `iterable` (flaws of the iteration order included)."""
        if isinstance(iterable, ast.Name) and iterable.id in scope.lists:
            lst = scope.lists[iterable.id]
            return derive(self.list_shape(lst, scope, 0), iterable, iterable.id, lst.flaws)
        if (
            isinstance(iterable, ast.Call)
            and isinstance(iterable.func, ast.Attribute)
            and iterable.func.attr in ("items", "keys", "values")
        ):
            return derive(self.shape(iterable.func.value, scope), iterable)
        return derive(self.shape(iterable, scope), iterable)

    def comprehension(self, node: ast.ListComp | ast.GeneratorExp | ast.SetComp | ast.DictComp, scope: Scope) -> Shape:
        """An item of the result, carrying the flaws of every iteration order it went through
        (a dict built from a set iterates in the set's order)."""
        inner = scope.child()
        flaws: tuple[Flaw, ...] = ()
        for gen in node.generators:
            item = self.element(gen.iter, inner)
            flaws += flaws_of(item)
            for target in ast.walk(gen.target):
                if isinstance(target, ast.Name):
                    inner.values[target.id] = derive(item, target, target.id)
        body = node.value if isinstance(node, ast.DictComp) else node.elt
        shape = derive(self.shape(body, inner), node, None, flaws)
        if isinstance(node, ast.SetComp):
            shape = with_flaw(shape, Flaw(UnorderedIteration.code, node, "a set comprehension"))
        return shape

    @abstractmethod
    def call(self, node: ast.Call, scope: Scope, hint: str | None) -> Shape:
        """The shape of the value the call `node` returns (`hint`: the name it is assigned to)."""

    def new_list(self, node: ast.expr, scope: Scope) -> ListValue | None:
        """A `ListValue` for a list display or a copy of a known list, else None."""
        if isinstance(node, (ast.List, ast.Tuple)):
            return ListValue(list(node.elts), ())
        if isinstance(node, ast.Name) and node.id in scope.lists:
            old = scope.lists[node.id]
            return ListValue(list(old.elements), old.flaws)
        return None
