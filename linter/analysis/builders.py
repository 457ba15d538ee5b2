"""Calls that build rather than send: radixgate's `Prompt` (a safe sink, it orders its segments
itself) and random generators, seeded or not."""

from __future__ import annotations

import ast

from .scope import Module, Scope

_PROMPT_CLASSES = (
    "radixgate.Prompt",
    "radixgate._prompt.Prompt",
    # radixgate's framework integrations render static-first themselves, as `Prompt` does
    "radixgate.langchain.ChatPromptTemplate",
    "radixgate.llamaindex.ChatPromptTemplate",
)
_PROMPT_PREFIXES = tuple(p + "." for p in _PROMPT_CLASSES)
#: radixgate's segment constructors: each call is a typed piece of a `Prompt`, never a sink.
_SEGMENT_FUNCTIONS = ("system", "tools", "examples", "document", "history", "context", "user", "Segment")
_RNG_CLASSES = ("random.Random", "numpy.random.default_rng", "numpy.random.RandomState")


def _kw(node: ast.Call, name: str) -> ast.expr | None:
    return next((kw.value for kw in node.keywords if kw.arg == name), None)


def root_call(node: ast.expr) -> ast.expr:
    """The start of a method chain: `Prompt(...).static(a).turn(b)` -> `Prompt(...)`."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            node = node.value
        else:
            return node


def is_radixgate_prompt(module: Module, node: ast.expr, scope: Scope) -> bool:
    """Whether `node` builds or uses a radixgate `Prompt` (a safe sink)."""
    if not isinstance(node, ast.Call) or not (module.may_use_radixgate or scope.prompts):
        return False  # (`module.prompt_names` holds only names of radixgate's builders)
    func = node.func
    while isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
        func = func.value.func
    qual = module.qualname(func) or ""
    if qual in _PROMPT_CLASSES or qual.startswith(_PROMPT_PREFIXES):
        return True
    if qual.startswith("radixgate.") and qual.rsplit(".", 1)[-1] in _SEGMENT_FUNCTIONS:
        return True
    root = root_call(node)
    return isinstance(root, ast.Name) and (root.id in scope.prompts or root.id in module.prompt_names)


def rng_construction(module: Module, node: ast.expr) -> bool | None:
    """Seededness of `random.Random(seed)` and friends; None when `node` builds no generator."""
    if not isinstance(node, ast.Call) or module.qualname(node.func) not in _RNG_CLASSES:
        return None
    seed = node.args[0] if node.args else _kw(node, "seed") or _kw(node, "x")
    return seed is not None and not (isinstance(seed, ast.Constant) and seed.value is None)
