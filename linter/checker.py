"""The checker: parse a file, read its module and functions, yield `Violation`s.

One pass collects the module's facts (imports, constants, functions); the walker then reads the
module body and every function, handing each prompt site to `ordering.check_site`. A module that
defines templates gets a first silent pass so that placeholders filled in one function are known
when the template defined in another is checked.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from . import sinks
from .expressions import Evaluator
from .facts import collect_module
from .ordering import Finding, check_site, estimate_tokens
from .placeholders import double_brace_template, locate
from .rules import (
    RULES,
    DynamicBeforeCacheBreakpoint,
    DynamicBeforeStatic,
    DynamicInSystemPrompt,
    ShortStaticPrefix,
    TurnBeforeDocuments,
)
from .scope import Elsewhere, Module, ParamRef, Scope, functions_in
from .settings import Settings
from .shape import Kind
from .sinks import Site
from .violation import Violation
from .walker import Walker

#: Files without any of these words (lower-cased) cannot build a prompt promptlint recognizes.
_TRIGGER_WORDS = (
    "prompt",
    "messages",
    "role",
    "template",
    "completion",
    "invoke",
    "system",
    "instruction",
    "preamble",
    "generate_content",
    "predict",
    "complete",
    ".post(",
)
#: A statement or function none of whose lines has one of these cannot hold a prompt site or
#: fill a template placeholder, so the walker does not look inside it.
_HOT_WORDS = _TRIGGER_WORDS + (
    "create",
    "generate",
    "post",
    "format",
    "partial",
    "kwargs[",
    "inputs[",
    ".run(",
    ".stream(",
    "from_",
    "message",
)
#: The words `_hot_prefix` searches for: a word that contains another (`messages`, `message`) finds no new line.
_SCAN_WORDS = tuple(w for w in _HOT_WORDS if not any(o != w and o in w for o in _HOT_WORDS))
_NOQA = re.compile(r"#\s*(?:noqa|promptlint:\s*disable)(?::\s*|=)?([A-Z0-9, ]*)", re.IGNORECASE)
_SLOT = re.compile(r"\{[^{}]*\}")  # a `{placeholder}` of a template's text
_ORDER_FAMILY = frozenset(
    {DynamicBeforeStatic.code, DynamicInSystemPrompt.code, TurnBeforeDocuments.code, DynamicBeforeCacheBreakpoint.code}
)


class ParseFailure(Exception):
    """The file is not valid Python; the message says where."""


def check_source(source: str, filename: str, settings: Settings) -> list[Violation]:
    """All violations in one file's `source`, sorted by position, suppressions applied."""
    return check(source, filename, settings)[0]


class Parsed(NamedTuple):
    """A parsed file and the facts collected from it."""

    tree: ast.Module
    lines: list[str]
    module: Module
    source: str


def parse(source: str, filename: str, name: str = "", force: bool = False) -> Parsed | None:
    """Parse `source` and collect its module facts; None when it cannot hold a prompt (unless
    `force`: another module imports its names)."""
    low = source.lower()
    if not force and not any(word in low for word in _TRIGGER_WORDS):
        return None
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        where = f"{filename}:{exc.lineno}:{exc.offset}"
        raise ParseFailure(f"{where}: cannot parse: {exc.msg}") from None
    lines = source.splitlines()
    module = collect_module(tree, lines, _hot_prefix(low, len(lines)), name)
    module.may_use_radixgate = "radixgate" in source or any(q.startswith("radixgate") for q in module.imports.values())
    return Parsed(tree, lines, module, source)


def check(source: str, filename: str, settings: Settings) -> tuple[list[Violation], ast.Module | None]:
    """`check_source`, also returning the parsed tree (None when the file was not parsed)."""
    parsed = parse(source, filename)
    if parsed is None:
        return [], None
    from pathlib import Path

    from .project import Project

    project = Project()  # one file is a project too: its own wrappers are followed
    project.add(Path(filename), parsed, True)
    project.run()
    return violations_for(project.entries[0].sites, parsed, filename, settings), parsed.tree


def walk(parsed: Parsed) -> list[Site]:
    """Every prompt site of the module body and its functions (methods know their class)."""
    sites: list[Site] = []
    finish_walk(parsed, start_walk(parsed, sites.append))
    return sites


def start_walk(parsed: Parsed, on_site: Callable[[Site], None]) -> Walker:
    """Read the module's top level (its constants), returning the walker to finish with."""
    walker = Walker(Evaluator(parsed.module), on_site)
    walker.body(parsed.tree.body, Scope(is_module=True))
    return walker


def finish_walk(parsed: Parsed, walker: Walker) -> None:
    """Read every function (methods knowing their class), then the templates."""
    module = parsed.module
    hot_classes = {cls for fn, cls in functions_of(parsed) if cls and module.is_hot(fn.lineno, fn.end_lineno or 0)}
    for fn, cls in functions_of(parsed):
        # `__init__` of a class with a prompt method: the values it stores on `self` matter.
        if module.is_hot(fn.lineno, fn.end_lineno or fn.lineno) or (fn.name == "__init__" and cls in hot_classes):
            walker.function = fn.name
            walker.merged.clear()  # branch merging is per function
            walker.body(fn.body, Scope(cls=cls, params=parameters(fn, (module.name, cls, fn.name))))
    walker.function = ""
    walker.finish()  # templates last: their placeholders may be filled anywhere in the module
    if module.project is None:
        template_constant_sites(module, walker.on_site)


def template_constant_sites(module: Module, on_site: Callable[[Site], None]) -> None:
    """Templates held in prompt-named constants, their placeholders filled as the code fills them
    (low confidence: what sends them may not be visible)."""
    ev = Evaluator(module)
    ev.defining = True
    for _name, node in module.template_constants:
        ev.template_text = str(node.value)
        template = double_brace_template(ev.template_text) or ev.template_text  # `{{task}}` filled by `.replace`
        on_site(Site(node, [sinks.Segment(None, ev.fill(template, node, [], {}))], "low", None))


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


def violations_for(sites: list[Site], parsed: Parsed, filename: str, settings: Settings) -> list[Violation]:
    violations = _dedupe(list(_violations(sites, filename, settings, parsed.module)))
    if violations and ("noqa" in parsed.source or "promptlint:" in parsed.source):
        violations = _suppress(violations, parsed.lines, _string_ends(parsed.tree))
    return violations


def functions_of(parsed: Parsed) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]]:
    """Every function of the module with its class (None for plain functions), listed once."""
    if parsed.module.all_functions is None:
        parsed.module.all_functions = list(functions_in(parsed.tree.body, None))
    return parsed.module.all_functions


def _hot_prefix(low: str, num_lines: int, extra: tuple[str, ...] = ()) -> list[int]:
    """Running count of lines holding a `_HOT_WORDS` word (or one of `extra`, such as the names of
    the project's wrappers): prefix[i] counts lines 1..i."""
    starts = [0]
    find = low.find
    at = find("\n")
    while at >= 0:
        starts.append(at + 1)
        at = find("\n", at + 1)
    starts.append(len(low) + 1)
    marked = bytearray(max(num_lines, len(starts)) + 1)
    for word in _SCAN_WORDS + extra:
        at = find(word)
        while at >= 0:
            line = bisect.bisect_right(starts, at)
            marked[line] = 1
            at = find(word, starts[line])  # the next line: one hit per line is enough
    return list(itertools.accumulate(marked))


def _violations(sites: list[Site], filename: str, settings: Settings, module: Module) -> Iterator[Violation]:
    ordered = sorted(sites, key=lambda s: s.confidence != "high")
    for site in ordered:
        span = (getattr(site.node, "lineno", 0), getattr(site.node, "end_lineno", 0) or 0)
        for finding in check_site(site, settings.min_lost_tokens):
            if isinstance(finding.node, Elsewhere):
                continue  # the wrapper's own text: reported where the wrapper is
            if settings.is_enabled(finding.code):
                yield _to_violation(finding, filename, span, site.via, settings.min_lost_tokens)
                if module.variants and (twin := _in_variant(module, finding, settings.min_lost_tokens)) is not None:
                    yield _to_violation(finding._replace(node=twin), filename, span, site.via, settings.min_lost_tokens)
        hosted = site.provider is not None and site.confidence == "high" and site.via is None
        if hosted and settings.is_enabled(ShortStaticPrefix.code):
            short = _short_prefix(site, settings.min_static_tokens)
            if short is not None:
                yield _to_violation(short, filename, span)


def _in_variant(module: Module, finding: Finding, threshold: int) -> ast.AST | None:
    """The same placeholder in the other variant of a template chosen by a conditional, when the
    finding is at a placeholder of the variant that was read (`EN if lang == "en" else ZH`: both are
    sent), and, for static text pushed out, when the other variant has that much after it too."""
    needle = getattr(finding.node, "value", None)
    row = getattr(finding.node, "lineno", 0)
    if not isinstance(needle, str) or not needle.startswith("{"):
        return None
    for first, other in module.variants.items():
        if first.lineno <= row <= (first.end_lineno or first.lineno):
            twin = locate(module, other, needle)
            after = str(other.value).partition(needle)[2].partition("}")[2]
            runs = _SLOT.split(after) if finding.tokens is not None else ()
            if twin is other or (runs and max(estimate_tokens(run) for run in runs) < threshold):
                return None
            return twin
    return None


def _to_violation(
    finding: Finding, filename: str, span: tuple[int, int], via: str | None = None, threshold: int = 64
) -> Violation:
    rule = RULES[finding.code]
    node = finding.node
    row, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
    end_row = getattr(node, "end_lineno", None) or row
    end_col = (getattr(node, "end_col_offset", None) or col - 1) + 1
    holder_end = getattr(node, "holder_end", end_row)
    message = rule.format(**finding.fields) + (f" (sent by {via})" if via else "")
    return Violation(
        rule.code,
        message,
        filename,
        row,
        col,
        end_row,
        end_col,
        rule.severity(finding.change, finding.tokens, threshold),
        None,
        (span[0], max(span[1], holder_end)),
    )


def _short_prefix(site: Site, minimum: int) -> Finding | None:
    """KV301: the static text before the first non-static part, when it is known to end there
    (a value in a system or tools segment may be a constant from another module)."""
    parts = [(part, seg.role) for seg in site.segments for part in seg.shape]
    head = []
    for part, role in parts:
        if part.kind is not Kind.TEXT:
            if part.kind is Kind.UNKNOWN and role in (None, "system", "tools"):
                return None
            break
        head.append(part)
    chars = sum(p.chars for p in head)
    if not chars:
        return None
    from radixgate._wire import count_tokens

    known = "".join(p.label for p in head)
    tokens = count_tokens(known) + max(0, chars - len(known)) // 4
    if tokens >= minimum:
        return None
    return Finding(ShortStaticPrefix.code, site.node, {"tokens": tokens, "minimum": minimum}, None)


def _dedupe(violations: list[Violation]) -> list[Violation]:
    seen: set[tuple] = set()
    out: list[Violation] = []
    for v in violations:
        family = "order" if v.code in _ORDER_FAMILY else v.code
        key = (family, v.row, v.col)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return sorted(out, key=lambda v: (v.row, v.col, v.code))


def _string_ends(tree: ast.Module) -> list[tuple[int, int]]:
    """(first, last) lines of every multi-line string literal."""
    return [
        (n.lineno, n.end_lineno)
        for n in ast.walk(tree)
        if isinstance(n, (ast.JoinedStr, ast.Constant)) and n.end_lineno and n.end_lineno > n.lineno
    ]


def _suppress(violations: list[Violation], lines: list[str], strings: list[tuple[int, int]]) -> list[Violation]:
    """Drop violations with `# noqa[: CODES]` or `# promptlint: disable=CODES` on their first or
    last line, or after the closing quotes of the multi-line string they sit in."""
    kept = []
    for v in violations:
        rows = {v.row, v.end_row} | {end for start, end in strings if start <= v.row <= end}
        if v.span and v.code == ShortStaticPrefix.code:
            rows.add(v.span[1])
        if not any(_suppressed(lines[r - 1], v.code) for r in rows if 0 < r <= len(lines)):
            kept.append(v)
    return kept


def _suppressed(line: str, code: str) -> bool:
    if "#" not in line:
        return False
    match = _NOQA.search(line)
    if match is None:
        return False
    codes = [c.strip().upper() for c in match.group(1).split(",") if c.strip()]
    return not codes or any(code.startswith(c) for c in codes)
