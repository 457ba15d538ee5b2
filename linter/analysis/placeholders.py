"""Templates' `{placeholders}`: how a format string splits, where each placeholder sits in the
source, and a value filled elsewhere placed at its placeholder."""

from __future__ import annotations

import ast
import re
import string

from .scope import Module
from .shape import Shape

#: Slots of other template engines: Jinja's `{{ name }}`, `string.Template`'s `$name` / `${name}` (`$$` is `$`).
_SLOTS = {
    "jinja": re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}"),
    "dollar": re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)"),
}


def as_format_string(text: str, style: str) -> str:
    """A Jinja (`style` "jinja") or `string.Template` ("dollar") template as a `str.format` one with
    the same slots; anything else (filters, loops) stays literal text."""
    out: list[str] = []
    at = 0
    for match in _SLOTS[style].finditer(text):
        out.append(text[at : match.start()].replace("{", "{{").replace("}", "}}"))
        name = next((g for g in match.groups() if g), None)
        out.append("{" + name + "}" if name else "$")
        at = match.end()
    out.append(text[at:].replace("{", "{{").replace("}", "}}"))
    return "".join(out)


_DOUBLE_BRACE = re.compile(r"\{\{[A-Za-z_][A-Za-z0-9_]*\}\}")


def double_brace_template(text: str) -> str | None:
    """A template whose slots are `{{name}}`, filled by `.replace` (not `str.format`: the text has no
    `{field}`; not Jinja: no `{%`), as a `str.format` one with the same slots; else None."""
    if "{{" not in text or "{%" in text or _DOUBLE_BRACE.search(text) is None:
        return None
    pieces = placeholders(text)
    if pieces is not None and any(fld is not None for _lit, fld in pieces):
        return None
    return as_format_string(text, "jinja")


def placeholders(template: str) -> list[tuple[str, str | None]] | None:
    """`"Hi {name}!"` -> [("Hi ", "name"), ("!", None)]; None when it is not a format string."""
    try:
        return [(lit, fld) for lit, fld, _spec, _conv in string.Formatter().parse(template)]
    except ValueError:
        return None


def same_slots(first: str, other: str) -> bool:
    """Whether two templates fill the same placeholders in the same order (two variants of one prompt)."""
    a, b = placeholders(first), placeholders(other)
    slots = [fld for _lit, fld in a] if a is not None else None
    return bool(slots) and b is not None and slots == [fld for _lit, fld in b] and any(slots)


def locate(module: Module, holder: ast.expr, needle: str) -> ast.AST:
    """A node-like position of `needle` inside the source of the literal `holder` (the exact
    column of a `{placeholder}`), or `holder` itself when it cannot be found."""
    start = getattr(holder, "lineno", None)
    if start is None or not isinstance(holder, ast.Constant):
        return holder
    end = getattr(holder, "end_lineno", start) or start
    col = holder.col_offset
    for row in range(start, min(end, len(module.lines)) + 1):
        line = module.lines[row - 1]
        at = line.find(needle, col if row == start else 0)
        if at >= 0:
            spot = ast.Constant(value=needle)
            spot.lineno, spot.col_offset = row, at
            spot.end_lineno, spot.end_col_offset = row, at + len(needle) + 1
            spot.holder_end = end  # type: ignore[attr-defined]  # where a noqa may sit
            return spot
    return holder


def at_placeholder(shape: Shape, node: ast.AST, key: str) -> Shape:
    """A value filled elsewhere (maybe in another module), reported at the placeholder `node`."""
    return tuple(p._replace(node=node, label=key, flaws=tuple(f._replace(node=node) for f in p.flaws)) for p in shape)
