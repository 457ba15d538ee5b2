"""Fixes. Safe: `sort_keys=True` for KV201 and `sorted(...)` for KV202 / KV204; they change only
the order of things whose order never mattered to the program. Unsafe (`--unsafe-fixes`): for
KV101 inside one f-string, move the leading dynamic sentence after the static text; that
changes what the model reads, so it is never applied by `--fix` alone."""

from __future__ import annotations

import ast

from .rules import DirectoryOrder, DynamicBeforeStatic, UnorderedIteration, UnsortedJsonDumps
from .violation import Edit, Fix, Violation

_NO_SORT = ("scandir", "walk")  # DirEntry objects and walk tuples do not sort as names


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode()[:byte_col].decode(errors="replace"))


def attach(source: str, violations: list[Violation], tree: ast.Module | None = None) -> list[Violation]:
    """`violations` with a `fix` where promptlint knows one (`tree`: the parsed `source`)."""
    fixable = {UnsortedJsonDumps.code, UnorderedIteration.code, DirectoryOrder.code, DynamicBeforeStatic.code}
    if not any(v.code in fixable for v in violations):
        return violations
    tree = tree or ast.parse(source)
    lines = source.splitlines()
    paths: dict[int, list[tuple[ast.AST, ast.AST | None]]] = {}
    out = []
    for v in violations:
        fix = None
        if v.code in fixable:
            if v.row not in paths:
                paths[v.row] = _path_to(tree, v.row)
            path = paths[v.row]
            node, parent = _find(path, (v.row, v.col, v.end_row, v.end_col))
            if node is not None and v.code == UnsortedJsonDumps.code and isinstance(node, ast.Call):
                fix = _sort_keys(node, lines)
            elif node is not None and v.code in (UnorderedIteration.code, DirectoryOrder.code):
                fix = _wrap_sorted(node, parent, lines)
            elif v.code == DynamicBeforeStatic.code:
                fstring = next((n for n, _ in path if isinstance(n, ast.JoinedStr) and _holds(n, (v.row, v.col))), None)
                if fstring is not None:
                    fix = _move_head(fstring, (v.row, v.col), lines)
        out.append(v._replace(fix=fix) if fix else v)
    return out


_NO_POSITION = (ast.arguments, ast.comprehension, ast.withitem, ast.match_case)


def _path_to(tree: ast.AST, row: int) -> list[tuple[ast.AST, ast.AST | None]]:
    """(node, parent) for every node whose lines include `row`, outermost first: a descent
    along that line, not a walk of the whole tree."""
    path: list[tuple[ast.AST, ast.AST | None]] = []
    stack: list[tuple[ast.AST, ast.AST | None]] = [(tree, None)]
    while stack:
        node, parent = stack.pop()
        path.append((node, parent))
        for child in ast.iter_child_nodes(node):
            first = getattr(child, "lineno", None)
            if first is None:
                if isinstance(child, _NO_POSITION):
                    stack.append((child, node))
            elif first <= row <= (child.end_lineno or first):  # type: ignore[attr-defined]
                stack.append((child, node))
    return path


def _find(
    path: list[tuple[ast.AST, ast.AST | None]], span: tuple[int, int, int, int]
) -> tuple[ast.AST | None, ast.AST | None]:
    """The outermost expression with exactly `span` (1-based columns) and its parent."""
    for node, parent in path:
        if (
            isinstance(node, ast.expr)
            and (node.lineno, node.col_offset + 1, node.end_lineno, (node.end_col_offset or 0) + 1) == span
        ):
            return node, parent
    return None, None


def _sort_keys(call: ast.Call, lines: list[str]) -> Fix:
    row, end = call.end_lineno or call.lineno, call.end_col_offset or 0
    line = lines[row - 1]
    col = _char_col(line, end) - 1  # the closing parenthesis
    before = line[:col].rstrip()
    content = " sort_keys=True" if before.endswith((",", "(")) else ", sort_keys=True"
    if before.endswith("("):
        content = "sort_keys=True"
    return Fix("Add `sort_keys=True`", "safe", (Edit(row, col, row, col, content),))


def _wrap_sorted(node: ast.AST, parent: ast.AST | None, lines: list[str]) -> Fix | None:
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        if name in _NO_SORT:
            return None
    # Only where the value is iterated, so a list in place of a set reads the same.
    iterated = isinstance(parent, (ast.For, ast.comprehension)) or (
        isinstance(parent, ast.Call)
        and node in parent.args
        and (
            (isinstance(parent.func, ast.Attribute) and parent.func.attr in ("join", "extend"))
            or (isinstance(parent.func, ast.Name) and parent.func.id in ("list", "tuple"))
        )
    )
    if not iterated or not isinstance(node, ast.expr) or node.end_lineno is None or node.end_col_offset is None:
        return None
    start_line, end_line = lines[node.lineno - 1], lines[node.end_lineno - 1]
    start = _char_col(start_line, node.col_offset)
    end = _char_col(end_line, node.end_col_offset)
    return Fix(
        "Wrap in `sorted(...)`",
        "safe",
        (
            Edit(node.lineno, start, node.lineno, start, "sorted("),
            Edit(node.end_lineno, end, node.end_lineno, end, ")"),
        ),
    )


def _holds(fstring: ast.JoinedStr, where: tuple[int, int]) -> bool:
    """Whether one of the f-string's own placeholders starts at `where` (1-based column)."""
    return any(
        isinstance(v, ast.FormattedValue) and (v.value.lineno, v.value.col_offset + 1) == where for v in fstring.values
    )


def _move_head(fstring: ast.JoinedStr, where: tuple[int, int], lines: list[str]) -> Fix | None:
    """`f"Today is {d}. You are ..."` -> `f"You are ...\\nToday is {d}."` when everything after
    the last placeholder's sentence is static text."""
    values = fstring.values
    last = max((i for i, v in enumerate(values) if isinstance(v, ast.FormattedValue)), default=-1)
    if last < 0:
        return None
    if not any(
        (v.value.lineno, v.value.col_offset + 1) == where
        for v in values[: last + 1]
        if isinstance(v, ast.FormattedValue)
    ):
        return None
    rest = values[last + 1 :]
    if not rest or not isinstance(rest[0], ast.Constant) or fstring.end_lineno is None:
        return None
    tail_text = "".join(str(v.value) for v in rest if isinstance(v, ast.Constant))  # all of them: after the last value
    cut = min((i + len(b) for b in (". ", ".\n", "\n") if (i := tail_text.find(b)) >= 0), default=-1)
    if not 0 <= cut <= 24:  # no short end of sentence after the value: move the value alone
        cut = len(tail_text) - len(tail_text.lstrip(" \t\n.,;:|-"))
    if not tail_text[cut:].strip():
        return None
    head = list(values[: last + 1]) + [ast.Constant(tail_text[:cut].rstrip())]
    moved = ast.JoinedStr([ast.Constant(tail_text[cut:].rstrip() + "\n"), *head])
    start = _char_col(lines[fstring.lineno - 1], fstring.col_offset)
    end = _char_col(lines[fstring.end_lineno - 1], fstring.end_col_offset or 0)
    return Fix(
        "Move the dynamic sentence after the static text",
        "unsafe",
        (Edit(fstring.lineno, start, fstring.end_lineno, end, ast.unparse(moved)),),
    )


def apply(source: str, violations: list[Violation], unsafe: bool = False) -> tuple[str, int]:
    """`source` with the fixes of `violations` applied (safe ones, or all with `unsafe`), and
    how many violations were fixed. Overlapping fixes are left for the next run."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def position(row: int, col: int) -> int:
        return offsets[row - 1] + col

    chosen: list[tuple[int, int, str]] = []
    fixed = 0
    taken: list[tuple[int, int]] = []
    for v in violations:
        if v.fix is None or (v.fix.applicability != "safe" and not unsafe):
            continue
        spans = [(position(e.row, e.col), position(e.end_row, e.end_col), e.content) for e in v.fix.edits]
        lo, hi = min(s for s, _, _ in spans), max(e for _, e, _ in spans)
        if any(lo <= b and a <= hi for a, b in taken):
            continue
        taken.append((lo, hi))
        chosen.extend(spans)
        fixed += 1
    text = source
    for start, end, content in sorted(chosen, key=lambda s: (s[0], s[1]), reverse=True):
        text = text[:start] + content + text[end:]
    return text, fixed
