"""Read one prompt site in model order and decide which rules it breaks.

For each dynamic part, the first of these that holds is reported:
1. a `cache_control` breakpoint follows it                       -> KV104
2. it is the question or history, and a shared document follows -> KV103
("enough static text": a run of consecutive static text of at least `min-lost-tokens` tokens;
"a shared document": one that is the same across requests — read from a file, a module constant,
a cached value — never a name alone or per-query retrieval such as `similarity_search(query)`.)
3. enough static text follows it in the same segment            -> KV101
4. it is in the system prompt and static content follows later  -> KV102
5. enough static text follows it in later segments              -> KV101
6. a shared document follows it                                 -> KV103
7. it changes every request and the conversation history follows -> KV101
A flaw (KV201-KV204) is reported when something cacheable follows the flawed value (static
text, a document, or a later dynamic value that keeps the flawed value inside the prefix), or
always for tool schemas and system prompts. Nothing is reported for values that come after all
static content: that is where dynamic content belongs.
"""

from __future__ import annotations

import ast
from typing import NamedTuple

from radixgate._wire import count_tokens_offline

from ..rules import DynamicBeforeCacheBreakpoint, DynamicBeforeStatic, DynamicInSystemPrompt, TurnBeforeDocuments
from .names import is_setup_slot
from .shape import Change, Kind, Part, is_shared_doc
from .site import Site


class Finding(NamedTuple):
    """A rule broken at `node`, with the fields its message template needs."""

    code: str
    node: ast.AST | None  # None: the finding has no location of its own (reported at the call)
    fields: dict
    change: Change | None
    tokens: int | None = None  # static tokens pushed out of the prefix (KV101/KV102)


_HOW = {
    Change.PER_REQUEST: "changes every request",
    Change.PER_SESSION: "changes per user",
    Change.PER_DAY: "changes daily",
}
_WHAT = {
    Kind.TIME: "timestamp",
    Kind.ID: "identifier",
    Kind.RANDOM: "random value",
    Kind.TURN: "per-turn input",
    Kind.HISTORY: "conversation history",
    Kind.DOC: "per-query document",
}


def _describe(part: Part) -> str:
    how = _HOW.get(part.change, "")
    kind = _WHAT.get(part.kind, "value")
    return f"{kind} `{part.label}` ({how})" if how else f"{kind} `{part.label}`"


def check_site(site: Site, min_lost_tokens: int) -> list[Finding]:
    flat = [(part, i, seg.role) for i, seg in enumerate(site.segments) for part in seg.shape]
    findings: list[Finding] = []
    reported: set[tuple[str, str]] = set()  # one finding per value and rule in a prompt
    broken = False  # a value that changes every request came first (in a low-confidence site: skip flaws)
    after_history = False  # the history came before: a turn after it is new on every request anyway
    for index, (part, seg, role) in enumerate(flat):
        if (part.is_dynamic or _per_query_doc(part)) and (
            site.confidence == "high" or part.change >= Change.PER_SESSION
        ):
            rest = flat[index + 1 :]
            if part.kind is Kind.HISTORY:  # a turn after the history is new anyway; system text after it is lost
                rest = [r for r in rest if r[1] == seg or r[2] in ("system", "tools")]
            if after_history and role not in ("system", "tools"):  # a turn after the history: only a breakpoint
                finding = (
                    _found(DynamicBeforeCacheBreakpoint.code, part)
                    if any(p.kind is Kind.BREAK for p, _, _ in rest)
                    else None
                )
            else:
                finding = _dynamic(part, seg, role, rest, min_lost_tokens, site.confidence)
            if finding is not None and (finding.code, part.label) not in reported:
                reported.add((finding.code, part.label))
                findings.append(finding)
        for flaw in part.flaws:
            in_prefix = role in ("tools", "system") or _cacheable_after(flat[index + 1 :], min_lost_tokens)
            if (flaw.always or in_prefix) and not (broken and site.confidence != "high"):
                findings.append(Finding(flaw.code, flaw.node, {"label": flaw.label}, None))
        # In a template read on its own (low confidence) any input before a flaw already ends the prefix.
        broken = broken or (part.is_dynamic and (part.change is Change.PER_REQUEST or site.confidence != "high"))
        after_history = after_history or part.kind is Kind.HISTORY
    return findings


def _per_query_doc(part: Part) -> bool:
    """Documents retrieved for this request (`context`, `docs`): they end the cached prefix too."""
    return part.kind is Kind.DOC and part.change is Change.PER_REQUEST


def _dynamic(part: Part, seg: int, role: str | None, rest: list, threshold: int, confidence: str) -> Finding | None:
    if _per_query_doc(part):  # only what it pushes out of the prefix: static text after it
        same = longest_static_run([p for p, s, _ in rest if s == seg], threshold)
        return _found(DynamicBeforeStatic.code, part, same, what=_tokens(same)) if same >= threshold else None
    if any(p.kind is Kind.BREAK for p, _, _ in rest):
        return _found(DynamicBeforeCacheBreakpoint.code, part)
    doc = next((p for p, _, _ in rest if is_shared_doc(p)), None)
    if doc is not None and not _asked(part):  # a value only guessed per user: no KV103 on a guess
        doc = None
    if doc is not None and part.kind in (Kind.TURN, Kind.HISTORY):
        return _found(TurnBeforeDocuments.code, part, doc=doc.label)
    same = longest_static_run([p for p, s, _ in rest if s == seg], threshold)
    if same >= threshold:
        return _found(DynamicBeforeStatic.code, part, same, what=_tokens(same))
    total = longest_static_run([p for p, _, _ in rest], threshold)
    if total >= threshold and confidence == "high":
        code = DynamicInSystemPrompt.code if role == "system" else DynamicBeforeStatic.code
        return _found(code, part, total, what=_tokens(total))
    if doc is not None and confidence == "high":
        return _found(TurnBeforeDocuments.code, part, doc=doc.label)
    history = any(p.kind is Kind.HISTORY for p, _, _ in rest)
    if history and part.change is Change.PER_REQUEST and part.kind is not Kind.HISTORY:
        return _found(DynamicBeforeStatic.code, part, what="the conversation history")
    return None


def _asked(part: Part) -> bool:
    """KV103's turn: the question of this request or the history, not a slot only guessed to vary per user."""
    return part.kind is Kind.HISTORY or part.change is Change.PER_REQUEST


def _found(code: str, part: Part, tokens: int | None = None, **fields: str) -> Finding:
    """A finding about `part`, at its node; its label is described only here (most parts give none)."""
    return Finding(code, part.node, {"label": _describe(part), **fields}, part.change, tokens)


def estimate_tokens(text: str) -> int:
    """A fast cl100k estimate: about four characters a token once runs of whitespace (indentation)
    count as one."""
    return (len(" ".join(text.split())) + 3) // 4


def _part_tokens(part: Part) -> int:
    known = part.label if len(part.label) == part.chars else ""
    return estimate_tokens(known) if known else (part.chars + 3) // 4


def longest_static_run(parts: list[Part], threshold: int) -> int:
    """The tokens of the longest block of consecutive static text: labels between values are not a
    block worth caching, a paragraph of instructions is. Estimated; counted exactly with cl100k when
    the estimate is near `threshold` and the text is known."""
    best: list[Part] = []
    run: list[Part] = []
    best_tokens = run_tokens = 0
    for p in parts:
        if p.kind is Kind.TEXT:
            run.append(p)
            run_tokens += _part_tokens(p)
            if run_tokens > best_tokens:
                best, best_tokens = list(run), run_tokens
        elif p.kind is Kind.UNKNOWN and is_setup_slot(p.label):
            run_tokens += 1  # "at most {max_items} items", "in {language}": one block of instructions, not two
        elif p.kind is not Kind.BREAK:
            run, run_tokens = [], 0
    if threshold // 2 <= best_tokens < threshold * 2 and all(len(p.label) == p.chars for p in best):
        return exact_tokens("".join(p.label for p in best), best_tokens)
    return best_tokens


def exact_tokens(text: str, estimate: int) -> int:
    """cl100k tokens of `text`, or `estimate` where the offline encoding is not installed (never a
    download: promptlint stays offline without `--stats`)."""
    counted = count_tokens_offline(text)
    return estimate if counted is None else counted


def _tokens(n: int) -> str:
    return f"{n:,} tokens of static text"


def _cacheable_after(rest: list, threshold: int) -> bool:
    """Whether the flawed value is inside the prefix of what follows: enough static text, or
    any value at all (the question after shuffled examples)."""
    if any(p.kind not in (Kind.TEXT, Kind.BREAK) for p, _, _ in rest):
        return True
    return sum(_part_tokens(p) for p, _, _ in rest if p.kind is Kind.TEXT) >= threshold
