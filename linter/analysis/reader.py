"""Reading one parsed module: its top level first (its constants), then every function that may
hold a prompt (methods knowing their class), then its templates, each prompt site found handed to a
callback. `project.Project` reads its modules so, in steps, linking them in between."""

from __future__ import annotations

import ast
from collections.abc import Callable

from .bodies import body
from .calls import Evaluator
from .facts import Parsed
from .placeholders import double_brace_template
from .scope import Module, ParamRef, Scope, functions_in
from .site import Segment, Site
from .walker import Walker, read_function


def start_walk(parsed: Parsed, on_site: Callable[[Site], None]) -> Walker:
    """Read the module's top level (its constants), returning the walker to finish with."""
    walker = Walker(Evaluator(parsed.module, read_function), on_site)
    walker.body(parsed.tree.body, Scope(is_module=True))
    return walker


def finish_walk(parsed: Parsed, walker: Walker) -> None:
    """Read every function (methods knowing their class), then the templates (the constant templates
    are read by `template_constant_sites` once the project's every filling is known)."""
    module = parsed.module
    hot_classes = {cls for fn, cls in functions_of(parsed) if cls and module.is_hot(fn.lineno, fn.end_lineno or 0)}
    for fn, cls in functions_of(parsed):
        # `__init__` of a class with a prompt method: the values it stores on `self` matter.
        if module.is_hot(fn.lineno, fn.end_lineno or fn.lineno) or (fn.name == "__init__" and cls in hot_classes):
            walker.function = fn.name
            walker.merged.clear()  # branch merging is per function
            walker.body(body(module, fn), Scope(cls=cls, params=parameters(fn, (module.name, cls, fn.name))))
    walker.function = ""
    walker.finish()  # templates last: their placeholders may be filled anywhere in the module


def template_constant_sites(module: Module, on_site: Callable[[Site], None]) -> None:
    """Templates held in prompt-named constants, their placeholders filled as the code fills them
    (low confidence: what sends them may not be visible)."""
    ev = Evaluator(module, read_function)
    ev.defining = True
    for _name, node in module.template_constants:
        ev.template_text = str(node.value)
        template = double_brace_template(ev.template_text) or ev.template_text  # `{{task}}` filled by `.replace`
        on_site(Site(node, [Segment(None, ev.fill(template, node, [], {}))], "low", None))


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef, key: tuple[str, str | None, str]) -> dict[str, ParamRef]:
    """References for `fn`'s parameters (`self` and `cls` left out), by name."""
    refs: dict[str, ParamRef] = {}
    positional = [a for a in fn.args.posonlyargs + fn.args.args if a.arg not in ("self", "cls")]
    for index, arg in enumerate(positional):
        refs[arg.arg] = _ref(arg.arg, key, index)
    for arg in fn.args.kwonlyargs:
        refs[arg.arg] = _ref(arg.arg, key, None)
    return refs


def _ref(name: str, key: tuple[str, str | None, str], index: int | None) -> ParamRef:
    ref = ParamRef(id=name, ctx=ast.Load())
    ref.fn, ref.index = key, index
    return ref


def functions_of(parsed: Parsed) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]]:
    """Every function of the module with its class (None for plain functions), listed once."""
    if parsed.module.all_functions is None:
        parsed.module.all_functions = list(functions_in(parsed.tree.body, None))
    return parsed.module.all_functions


def has_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether `parameters(fn, ...)` would name any (`self` and `cls` left out), without building them."""
    args = fn.args
    return bool(args.kwonlyargs) or any(a.arg not in ("self", "cls") for a in args.posonlyargs + args.args)


def reads_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef, module: Module) -> bool:
    """Whether `finish_walk` may read `fn`'s body with references to its parameters (`self` and `cls`
    left out): a function with some, at a line worth a look, or an `__init__` (read for its class)."""
    return has_parameters(fn) and (fn.name == "__init__" or module.is_hot(fn.lineno, fn.end_lineno or fn.lineno))


def message_list(arg: ast.expr, scope: Scope) -> bool:
    """Whether a call's argument is a list of messages (a display of dicts or message objects, or a
    local list built up from them)."""
    if isinstance(arg, ast.Name) and arg.id in scope.lists:
        elements = scope.lists[arg.id].elements
    elif isinstance(arg, (ast.List, ast.Tuple)):
        elements = arg.elts
    else:
        return False
    return any(isinstance(e, (ast.Dict, ast.Call)) for e in elements)
