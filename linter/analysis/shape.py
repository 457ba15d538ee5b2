"""String shapes: what promptlint knows about a prompt without running the code.

A shape is a tuple of parts in prompt order. A part is static text (with its length), a dynamic
value (what it is and how often it changes), a shared document, an unknown value, or a
`cache_control` breakpoint. Parts also carry *flaws*: a value whose content is stable but whose
order is not (a set joined into text, an unseeded shuffle, `os.listdir` order, `json.dumps`
without `sort_keys`). The rules read shapes; nothing here knows about rules.
"""

from __future__ import annotations

import ast
from enum import Enum, IntEnum
from typing import NamedTuple


class Change(IntEnum):
    """How often a value changes; the order is the order of cache damage."""

    NEVER = 0
    PER_PROCESS = 1
    PER_DAY = 2
    PER_SESSION = 3
    PER_REQUEST = 4


class Kind(Enum):
    """What a part of a prompt is."""

    TEXT = "text"  # static text written in the code
    TIME = "time"  # a clock reading
    ID = "id"  # a user, session or request identifier
    RANDOM = "random"  # a random value
    TURN = "turn"  # the question or other per-turn user content
    HISTORY = "history"  # the conversation so far
    DOC = "doc"  # a shared document (RAG context, a file's text)
    UNKNOWN = "unknown"  # a value promptlint cannot classify; never reported
    BREAK = "break"  # an Anthropic `cache_control` breakpoint (zero-length)


#: Kinds that are dynamic when they change at least per day (a tuple: enum members hash slowly).
DYNAMIC_KINDS = (Kind.TIME, Kind.ID, Kind.RANDOM, Kind.TURN, Kind.HISTORY)


class Flaw(NamedTuple):
    """An unstable-order problem attached to a value: `code` is a rule code."""

    code: str
    node: ast.AST
    label: str
    always: bool = False  # report even when nothing stable follows (tool schemas)


class Part(NamedTuple):
    """One piece of a prompt, in prompt order."""

    kind: Kind
    change: Change
    chars: int
    node: ast.AST | None
    label: str
    flaws: tuple[Flaw, ...] = ()

    @property
    def is_dynamic(self) -> bool:
        return self.kind in DYNAMIC_KINDS and self.change >= Change.PER_DAY


Shape = tuple[Part, ...]

_TEXT, _BREAK, _UNKNOWN, _NEVER = Kind.TEXT, Kind.BREAK, Kind.UNKNOWN, Change.NEVER
_new = tuple.__new__  # `Part(...)` without the Python-level `__new__` of a NamedTuple (hot: ~200k parts a lint)

EMPTY: Shape = ()


def text(chars: int, node: ast.AST | None = None, content: str = "") -> Shape:
    """A static part of `chars` characters (nothing for empty text); `content` when known."""
    return (_new(Part, (_TEXT, _NEVER, chars, node, content, ())),) if chars else EMPTY


def value(kind: Kind, change: Change, node: ast.AST | None, label: str) -> Shape:
    return (_new(Part, (kind, change, 0, node, label, ())),)


def unknown(node: ast.AST | None, label: str = "value") -> Shape:
    return (_new(Part, (_UNKNOWN, _NEVER, 0, node, label, ())),)


def moved(part: Part, node: ast.AST | None) -> Part:
    """`part` reported at `node` (`part._replace(node=node)`, without its Python-level overhead)."""
    return _new(Part, (part.kind, part.change, part.chars, node, part.label, part.flaws))


def flaws_of(shape: Shape) -> tuple[Flaw, ...]:
    seen: dict[tuple[str, int, int], Flaw] | None = None
    for part in shape:
        if not part.flaws:
            continue
        if seen is None:
            seen = {}
        for flaw in part.flaws:
            key = (flaw.code, getattr(flaw.node, "lineno", 0), getattr(flaw.node, "col_offset", 0))
            seen.setdefault(key, flaw)
    return tuple(seen.values()) if seen else ()


def derive(shape: Shape, node: ast.AST | None, label: str | None = None, extra_flaws: tuple[Flaw, ...] = ()) -> Shape:
    """One opaque value computed from `shape` (a call, a conversion): it is as dynamic as the
    most dynamic thing it was computed from and keeps every flaw. Static input stays static."""
    top = None
    many = flawed = False
    for p in shape:  # one pass: the first non-text part, whether there are more, whether any flaw
        if p.flaws:
            flawed = True
        if p.kind is not _TEXT and p.kind is not _BREAK:
            if top is None:
                top = p
            else:
                many = True
    flaws = flaws_of(shape) + extra_flaws if flawed else extra_flaws
    if top is None:
        chars = sum(p.chars for p in shape)
        if flaws:
            return (_new(Part, (_TEXT, _NEVER, chars, node, label or "text", flaws)),)
        return text(chars, node)
    if many:
        top = max((p for p in shape if p.kind is not _TEXT and p.kind is not _BREAK), key=_rank)
    return (_new(Part, (top.kind, top.change, 0, node if node is not None else top.node, label or top.label, flaws)),)


def _rank(p: Part) -> tuple[bool, Change, bool]:
    return (p.kind in DYNAMIC_KINDS, p.change, p.kind is Kind.DOC)


def with_flaw(shape: Shape, flaw: Flaw) -> Shape:
    """`shape` as one value carrying `flaw` as well."""
    return derive(shape, flaw.node, None, (flaw,))


def without_flaws(shape: Shape, codes: frozenset[str]) -> Shape:
    """`shape` with the flaws named by `codes` removed (`sorted(...)`, `sort_keys=True`)."""
    return tuple(p._replace(flaws=tuple(f for f in p.flaws if f.code not in codes)) for p in shape)


def gathered(shape: Shape, loop_flaws: tuple[Flaw, ...]) -> Shape:
    """`shape` added to a value once per loop round: it carries the order of the loop's items."""
    if not loop_flaws or not shape:
        return shape
    last = shape[-1]
    return (*shape[:-1], last._replace(flaws=last.flaws + loop_flaws))


def with_change(shape: Shape, change: Change) -> Shape:
    """`shape` with every non-static part lowered to at most `change` (module-level values)."""
    return tuple(
        p if p.kind is _TEXT or p.change <= change else _new(Part, (p.kind, change, p.chars, p.node, p.label, p.flaws))
        for p in shape
    )


def is_shared_doc(part: Part) -> bool:
    """A document that is the same across requests (read from a file, a module constant, the same
    per user): per-query retrieval and documents known only by their name are not shared."""
    return part.kind is Kind.DOC and part.change <= Change.PER_SESSION


def static_chars(shape: Shape) -> int:
    return sum(p.chars for p in shape if p.kind is Kind.TEXT)


_LEAF_FIELDS = frozenset({"ctx", "id", "attr", "arg", "op", "ops", "conversion", "kind", "is_async", "type_comment"})
_FIELDS_OF: dict[type, tuple[str, ...]] = {}


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """`ast.iter_child_nodes(node)` in its order, less the leaves that hold no name or call (contexts,
    operators)."""
    cls = node.__class__
    fields = _FIELDS_OF.get(cls)
    if fields is None:
        fields = _FIELDS_OF[cls] = tuple(f for f in getattr(cls, "_fields", ()) if f not in _LEAF_FIELDS)
    out: list[ast.AST] = []
    for field in fields:
        child = getattr(node, field, None)
        if child.__class__ is list:
            out.extend(c for c in child if isinstance(c, ast.AST))
        elif isinstance(child, ast.AST):
            out.append(child)
    return out
