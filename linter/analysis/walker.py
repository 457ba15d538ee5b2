"""Read a function (or the module body) statement by statement: keep each local name's shape up
to date and hand every prompt-building call to `SinkReader.find_site`."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from ..rules import DirectoryOrder, UnorderedIteration, UnseededShuffle
from . import builders, names, placeholders, sinks
from .bodies import body
from .calls import Evaluator
from .scope import Scope, constant_index, is_text_building
from .shape import EMPTY, Change, Flaw, Shape, flaws_of, gathered, with_change, without_flaws
from .site import Segment, Site

#: Methods whose keyword arguments fill a template's placeholders.
_FILL_METHODS = frozenset(
    ("partial", "format", "format_map", "format_messages", "format_prompt", "invoke", "ainvoke", "run", "arun")
    + ("stream", "astream", "predict", "apredict")
)
_LOW_CONFIDENCE_WORDS = frozenset({"prompt", "system", "template", "instructions", "preamble"})
_TEMPLATE_NAME_WORDS = _LOW_CONFIDENCE_WORDS | {"instruction"}
#: Words that name a template only as the name's last word: `QA_TEXT`, not `TEXT_TO_AUDIO_SAMPLE`.
_TEMPLATE_NAME_ENDS = frozenset({"message", "text"})
_PLACEHOLDER = re.compile(r"(?<!\{)\{[A-Za-z_][A-Za-z0-9_]*\}(?!\})")
#: `prompt_size`, `prompt_tokens`, `system_path`: a number or a name about a prompt, not its text.
_MEASURES = frozenset({"size", "count", "len", "length", "tokens", "num", "id", "path", "file", "hash", "chars", "key"})
_ORDER = frozenset({UnorderedIteration.code, UnseededShuffle.code, DirectoryOrder.code})

OnSite = Callable[[Site], None]


class Walker:
    """Walks statements in order; `on_site` receives each prompt found."""

    def __init__(self, ev: Evaluator, on_site: OnSite, reads_returns: bool = False) -> None:
        self.ev, self.on_site, self.reads_returns = ev, on_site, reads_returns  # returns: read_function's only
        self.sinks = sinks.SinkReader(ev)
        self.returns: list[Shape] = []
        self.deferred: list[tuple[ast.Call, Scope]] = []
        self.merged: dict[str, Shape] = {}  # the most dynamic value each name had in a branch
        self.function = ""  # the name of the function being read

    # -- statements ----------------------------------------------------------------------
    def body(self, stmts: list[ast.stmt], scope: Scope, loop_flaws: tuple[Flaw, ...] = ()) -> None:
        for stmt in stmts:
            self.statement(stmt, scope, loop_flaws)

    def statement(self, stmt: ast.stmt, scope: Scope, loop_flaws: tuple[Flaw, ...]) -> None:
        module = self.ev.module
        for expr in own_expressions(stmt):
            if module.is_hot(expr.lineno, expr.end_lineno or expr.lineno):
                self.scan(expr, scope)
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self.bind(target, stmt.value, scope, loop_flaws)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self.bind(stmt.target, stmt.value, scope, loop_flaws)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            self.augment(stmt.target.id, stmt.value, scope, loop_flaws)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            self.mutate(stmt.value, scope, loop_flaws)
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            # A custom template's `format`: what it returns is the prompt.
            is_site = scope.cls in module.prompt_classes and self.function in ("format", "format_prompt")
            shape = self.ev.shape(stmt.value, scope) if is_site or self.reads_returns else EMPTY
            self.returns.append(shape)
            self.maybe_messages(stmt.value, scope)
            if is_site:
                self.on_site(Site(stmt.value, [Segment(None, shape)], "high", None))
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            item = self.ev.element(stmt.iter, scope)
            own = flaws_of(item)
            flaws = loop_flaws + own
            one = without_flaws(item, _ORDER) if own else item  # order counts only in what is gathered
            for bound in ast.walk(stmt.target):
                if isinstance(bound, ast.Name):
                    scope.values[bound.id] = one
            was, scope.in_loop = scope.in_loop, True
            scope.depth += 1
            self.body(stmt.body, scope, flaws)
            scope.depth -= 1
            scope.in_loop = was
            self.body(stmt.orelse, scope, loop_flaws)
        elif isinstance(stmt, ast.While):
            was, scope.in_loop = scope.in_loop, True
            scope.depth += 1
            self.body(stmt.body, scope, loop_flaws)
            scope.depth -= 1
            scope.in_loop = was
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            self.body(stmt.body, scope, loop_flaws)
        elif isinstance(stmt, ast.If):
            scope.depth += 1
            self.body(stmt.body, scope, loop_flaws)
            self.body(stmt.orelse, scope, loop_flaws)
            scope.depth -= 1
        elif isinstance(stmt, ast.Try):
            scope.depth += 1
            for block in (stmt.body, *[h.body for h in stmt.handlers], stmt.orelse, stmt.finalbody):
                self.body(block, scope, loop_flaws)
            scope.depth -= 1

    def bind(self, target: ast.expr, value: ast.expr, scope: Scope, loop_flaws: tuple) -> None:
        if (
            isinstance(target, ast.Subscript)
            and isinstance(target.slice, ast.Constant)
            and isinstance(target.value, ast.Name)
            and target.value.id in ("kwargs", "inputs")
            and isinstance(target.slice.value, str)
        ):
            # A `format` override filling a template placeholder per call.
            self.ev.module.fillings.setdefault(target.slice.value, []).append(self.ev.shape(value, scope))
            return
        if isinstance(target, ast.Attribute) and scope.cls and names.is_self(target.value):
            self.bind_attribute(scope.cls, target.attr, value, scope)
            return
        if not isinstance(target, ast.Name):
            return
        name = target.id
        # `template = header + template` reads the old value: evaluate before forgetting it.
        found_literal = self.ev.literal(value, scope) if isinstance(value, (ast.BinOp, ast.Name, ast.IfExp)) else None
        reads_itself = (bool(loop_flaws) or name in scope.values) and names.reads_name(value, name)
        old_shape = self.ev.shape(value, scope, hint=name) if reads_itself and name in scope.values else None
        for table in (scope.lists, scope.literals, scope.exprs):
            table.pop(name, None)
        if not scope.depth:
            self.merged.pop(name, None)
        scope.values.pop(name, None)
        if builders.is_radixgate_prompt(self.ev.module, value, scope):
            scope.prompts.add(name)
            if scope.is_module:
                self.ev.module.prompt_names.add(name)
            return
        seeded = builders.rng_construction(self.ev.module, value)
        if seeded is not None:
            scope.rngs[name] = seeded
            return
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            scope.literals[name], scope.literal_nodes[name] = value.value, value
            if scope.is_module and is_template_text(name, value.value):
                self.ev.module.template_constants.append((name, value))
        elif isinstance(value, ast.Call) and (found := self.ev.literal(value, scope)) is not None:
            scope.literals[name], scope.literal_nodes[name] = found
            holder = found[1]
            if scope.is_module and isinstance(holder, ast.Constant) and is_template_text(name, found[0]):
                self.ev.module.template_constants.append((name, holder))
        elif found_literal is not None:
            scope.literals[name], scope.literal_nodes[name] = found_literal
            if scope.is_module and isinstance(value, ast.BinOp) and is_template_text(name, found_literal[0]):
                joined = ast.copy_location(ast.Constant(value=found_literal[0]), value)  # `P = COMMON + "...{x}"`
                self.ev.module.template_constants.append((name, joined))
        lst = self.ev.new_list(value, scope)
        if lst is not None and not scope.is_module:
            lst.flaws += loop_flaws
            scope.lists[name] = lst
            return
        if isinstance(value, (ast.Dict, ast.Call, ast.DictComp)):
            scope.exprs[name] = value
            if scope.is_module:
                self.ev.module.exprs[name] = value
        elif isinstance(value, ast.Name) and value.id in scope.exprs:  # `reduced = schema`: the same object
            scope.exprs[name] = scope.exprs[value.id]
        shape = old_shape if old_shape is not None else self.ev.shape(value, scope, hint=name)
        if loop_flaws and reads_itself:
            shape = gathered(shape, loop_flaws)  # `text = text + item`: gathered in loop order
        if scope.depth and not any(p.is_dynamic for p in shape) and name in self.merged:
            # A branch that rebinds a dynamic name to something unknown does not make it static.
            previous = self.merged[name]
            if any(p.is_dynamic for p in previous):
                shape = previous
        self.merged[name] = shape
        if scope.is_module and not scope.in_loop:
            shape = with_change(shape, Change.PER_PROCESS)
            self.ev.module.constants[name] = shape
        scope.values[name] = shape
        words = names.words(name)
        if set(words) & _LOW_CONFIDENCE_WORDS and words[-1] not in _MEASURES and is_text_building(value):
            if self.ev.module.is_shown(name):  # printed or written to a file only: not a prompt
                return
            self.on_site(
                Site(value, [Segment("system" if "system" in names.words(name) else None, shape)], "low", None)
            )

    def bind_attribute(self, cls: str, attr: str, value: ast.expr, scope: Scope) -> None:
        """`self.x = value` in a method: other methods of the class read `self.x` as this value."""
        module = self.ev.module
        found = self.ev.literal(value, scope)
        if found is not None:
            module.attr_literals[(cls, attr)] = found
        shape = self.ev.shape(value, scope, hint=attr)
        if isinstance(value, ast.Name) and value.id in scope.lists:
            shape = self.ev.element(value, scope)
        previous = module.attr_shapes.get((cls, attr))
        if previous is not None and any(p.is_dynamic or p.flaws for p in previous):
            if not any(p.is_dynamic or p.flaws for p in shape):
                return  # an attribute once dynamic stays so (a reset to "" does not clean it)
        module.attr_shapes[(cls, attr)] = shape

    def augment(self, name: str, value: ast.expr, scope: Scope, loop_flaws: tuple) -> None:
        if name in scope.lists:
            lst = scope.lists[name]
            lst.elements.append(ast.Starred(value=value))
            lst.flaws += loop_flaws
            return
        old = self.ev.shape(ast.Name(id=name), scope)
        held = self.ev.literal(ast.Name(id=name), scope)
        added = self.ev.literal(value, scope) if held is not None else None
        scope.values[name] = old + gathered(self.ev.shape(value, scope), loop_flaws)
        scope.literals.pop(name, None)
        if held is not None and added is not None:  # `template += FORMAT`: still a literal template
            scope.literals[name], scope.literal_nodes[name] = held[0] + added[0], held[1]

    def mutate(self, call: ast.Call, scope: Scope, loop_flaws: tuple) -> None:
        """`x.append(...)`, `x.extend(...)`, `x.insert(...)`, `random.shuffle(x)`, `x.sort()`."""
        func = call.func
        qual = self.ev.module.qualname(func)
        # A global seed fixes draws made at import only: every request after that draws anew.
        seeded = self.ev.module.is_random_seeded and scope.is_module
        if qual in names.RANDOM_SHUFFLE_CALLS and call.args and not seeded:
            self.taint(call.args[0], Flaw(UnseededShuffle.code, call, self.ev.module.unseeded(qual)), scope)
            return
        if not isinstance(func, ast.Attribute):
            return
        rng_seeded = scope.rngs.get(func.value.id) if isinstance(func.value, ast.Name) else None
        if func.attr == "shuffle" and rng_seeded is False and call.args:
            self.taint(call.args[0], Flaw(UnseededShuffle.code, call, self.ev.module.unseeded("shuffle")), scope)
            return
        target = func.value.id if isinstance(func.value, ast.Name) else None
        if target is None:
            return
        if func.attr == "sort" and target in scope.lists:
            scope.lists[target].flaws = tuple(f for f in scope.lists[target].flaws if f.code not in _ORDER)
        elif func.attr == "sort" and target in scope.values:
            scope.values[target] = without_flaws(scope.values[target], _ORDER)
        elif target in scope.lists and func.attr in ("append", "insert", "extend") and call.args:
            lst = scope.lists[target]
            item = call.args[-1]
            element = ast.Starred(value=item) if func.attr == "extend" else item
            index = constant_index(call.args[0]) if func.attr == "insert" else None
            if index is not None:
                lst.elements.insert(index, element)
            else:
                lst.elements.append(element)
            lst.flaws += loop_flaws

    def taint(self, target: ast.expr, flaw: Flaw, scope: Scope) -> None:
        if not isinstance(target, ast.Name):
            return
        if target.id in scope.lists:
            scope.lists[target.id].flaws += (flaw,)
        else:
            shape = self.ev.shape(target, scope)
            scope.values[target.id] = tuple(p._replace(flaws=p.flaws + (flaw,)) for p in shape) or shape

    # -- expressions ---------------------------------------------------------------------
    def scan(self, expr: ast.expr, scope: Scope) -> None:
        """Find prompt sites and template fillings among the calls inside `expr`."""
        for node in calls_in(expr):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _FILL_METHODS:
                self.record_fillings(node, func.attr, scope)
            if sinks.is_template_call(node):
                partial = sinks.kw(node, "partial_variables")
                if isinstance(partial, ast.Dict):
                    self.record_fillings(ast.Call(func=node.func, args=[partial], keywords=[]), "partial", scope)
                self.deferred.append((node, scope.child()))
                continue
            site = self.sinks.find_site(node, scope)
            if site is not None:
                self.on_site(site)
            elif self.ev.module.project is not None:
                self.ev.module.project.note_call(self.sinks, node, scope)

    def finish(self) -> None:
        """Check the templates found, now that every placeholder filling has been seen."""
        for node, scope in self.deferred:
            site = self.sinks.find_site(node, scope)
            if site is not None:
                self.on_site(site)
        self.deferred.clear()

    def record_fillings(self, node: ast.Call, method: str, scope: Scope) -> None:
        module = self.ev.module
        pairs: list[tuple[str, ast.expr]] = [(kw.arg, kw.value) for kw in node.keywords if kw.arg]
        if node.args and isinstance(node.args[0], ast.Dict):
            pairs += [
                (k.value, v)
                for k, v in zip(node.args[0].keys, node.args[0].values, strict=False)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
        own_text = method in ("format", "format_map")
        receiver = node.func.value if own_text and isinstance(node.func, ast.Attribute) else None
        own = self.ev.literal(receiver, scope) if receiver is not None else None
        for key, value in pairs:  # recorded on this module; other modules see them only if connected to it
            shape = self.ev.shape(value, scope, hint=key)
            if own is not None:  # `TEMPLATE.format(...)`: how this very template is filled
                module.text_fillings.setdefault(own[0], {}).setdefault(key, []).append(shape)
                if not scope.is_module and not names.is_configuration(value):
                    module.text_call_filled.add((own[0], key))
            module.fillings.setdefault(key, []).append(shape)
            if not scope.is_module and not names.is_configuration(value):  # filled per call, not once at import
                module.call_filled.add(key)
            if method == "partial" and not any(p.is_dynamic for p in shape):
                module.partial_names.add(key)

    def maybe_messages(self, node: ast.expr, scope: Scope) -> None:
        """A message list (or one message) returned for a caller to send is a site too."""
        elements = (
            [node]
            if isinstance(node, ast.Dict)
            else node.elts
            if isinstance(node, (ast.List, ast.Tuple))
            else scope.lists[node.id].elements
            if isinstance(node, ast.Name) and node.id in scope.lists
            else []
        )
        if any(sinks.role_of(e) for e in elements):
            segments = self.sinks.message_segments(ast.List(elts=[node]) if isinstance(node, ast.Dict) else node, scope)
            self.on_site(Site(node, segments, "high", None))


#: Fields that never hold a call: names, operators, flags (and the leaves `Name` and `Constant`).
_SCALAR_FIELDS = frozenset({"ctx", "id", "attr", "arg", "op", "ops", "conversion", "kind", "is_async", "type_comment"})
_FIELDS: dict[type, tuple[str, ...]] = {ast.Name: (), ast.Constant: ()}


def calls_in(root: ast.expr) -> list[ast.Call]:
    """Every call inside `root` (a leaner `ast.walk` that skips leaves, contexts and operators)."""
    calls: list[ast.Call] = []
    stack: list = [root]
    pop, push, extend = stack.pop, stack.append, stack.extend
    fields_of = _FIELDS.get
    while stack:
        node = pop()
        cls = node.__class__
        if cls is ast.Call:  # the commonest classes spelled out, their fields in `_fields` order
            calls.append(node)
            push(node.func)
            extend(node.args)
            extend(node.keywords)
            continue
        if cls is ast.Attribute or cls is ast.keyword:
            push(node.value)
            continue
        if node is None:
            continue
        fields = fields_of(cls)
        if fields is None:
            fields = _FIELDS[cls] = tuple(f for f in getattr(cls, "_fields", ()) if f not in _SCALAR_FIELDS)
        for name in fields:
            child = getattr(node, name, None)
            if child.__class__ is list:
                extend(child)
            elif isinstance(child, ast.AST):
                push(child)
    return calls


_VALUE_STATEMENTS = (ast.Expr, ast.Return, ast.Assign, ast.AugAssign, ast.AnnAssign)
_NO_EXPRESSIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try)
#: Statements whose fields hold no expression at all (imports hold `alias` nodes, `global` names).
_LEAF_STATEMENTS = frozenset({ast.Import, ast.ImportFrom, ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal})


def own_expressions(stmt: ast.stmt) -> list[ast.expr]:
    """The expressions a statement evaluates itself (not those of its nested blocks)."""
    cls = stmt.__class__
    if cls in _VALUE_STATEMENTS:
        value = stmt.value  # type: ignore[attr-defined]
        return [value] if value is not None else []  # targets hold no calls to scan
    if cls in _LEAF_STATEMENTS or isinstance(stmt, _NO_EXPRESSIONS):
        return []
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, _VALUE_STATEMENTS):
        return [stmt.value] if stmt.value is not None else []
    return [n for n in ast.iter_child_nodes(stmt) if isinstance(n, ast.expr)]


def is_template_text(name: str, text: str) -> bool:
    """A string with `{placeholders}` held by a prompt-named variable: a template defined here and
    filled elsewhere (checked once every module's fillings are known)."""
    words = names.words(name)
    named = bool(set(words) & _TEMPLATE_NAME_WORDS) or bool(words and words[-1] in _TEMPLATE_NAME_ENDS)
    return named and "{" in text and (bool(_PLACEHOLDER.search(text)) or bool(placeholders.double_brace_template(text)))


def read_function(ev: Evaluator, fn: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None = None) -> Shape:
    """The shape `fn` returns (its last `return`), its parameters unknown; finds no sites (`cls`:
    the class of a method, so that it reads `self.x`)."""
    walker = Walker(ev, lambda site: None, reads_returns=True)
    walker.body(body(ev.module, fn), Scope(cls=cls))
    return walker.returns[-1] if walker.returns else EMPTY
