"""History kept as generated: a later chat prompt reuses the token ids the engine generated for an
assistant message, instead of re-tokenizing its text (which rarely gives the same ids at temperature
1, and so cut the cache at the start of every earlier reply).

A reply is remembered per tenant (store.py), keyed by its text, with the ids whose decoding is
exactly that text; a forced tool call's arguments (the whole output of a named `tool_choice`) are
keyed by the tool's name and the canonical arguments, and spliced where the template writes the
arguments string. A later request's assistant message with byte-identical text is spliced in when
the chat template places it verbatim: the messages rendered with a marker in place of each such text
must give, with the texts put back, exactly the prompt the template renders. Then the prompt is the
text between the markers tokenized piece by piece, with the generated ids in the gaps, and cut where
each such turn's generation prompt ended; the pieces are the same from one turn to the next, so every
turn's prompt begins with the previous prompt and, where the template writes it verbatim, its reply.
A template that transforms the text (strips it, drops a reasoning block) fails that check and the
prompt is tokenized as before; the diagnostics then say `history_rerendered`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

MARK = "\x00radixgate-reply-{}\x00"
MAX_TRAILING = 4  # generated ids past the text (an EOS, a trimmed stop string) dropped at most


def reply_key(message: dict[str, Any]) -> str | None:
    """An assistant message's text key, or None when it has no text to match."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, str) or not content:
        return None
    return "text:" + content


def call_key(name: str, arguments: Any) -> str | None:
    """A tool call's key: its name and canonical arguments (None when they are not a JSON object)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else None
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    return "call:" + json.dumps([name, value], sort_keys=True, separators=(",", ":"))


def _slots(message: dict[str, Any]) -> list[tuple[Any, str, str]]:
    """(slot, key, text) of what an assistant message may hold as generated: its content ("content")
    and each tool call's arguments (the call's index), when the template is given them as text."""
    if message.get("role") != "assistant":
        return []
    slots: list[tuple[Any, str, str]] = []
    if (key := reply_key(message)) is not None:
        slots.append(("content", key, message["content"]))
    for j, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
            if (key := call_key(str(fn.get("name")), fn["arguments"])) is not None:
                slots.append((j, key, fn["arguments"]))
    return slots


def generated_keys(message: dict[str, Any]) -> list[str]:
    return [key for _, key, _ in _slots(message)]


def _marked(message: dict[str, Any], slot: Any, mark: str) -> dict[str, Any]:
    if slot == "content":
        return dict(message, content=mark)
    calls = list(message["tool_calls"])
    call = dict(calls[slot])
    call["function"] = dict(call["function"], arguments=mark)
    calls[slot] = call
    return dict(message, tool_calls=calls)


def reply_ids(
    token_ids: Sequence[int], text: str, detokenize: Callable[[Sequence[int]], str]
) -> tuple[int, ...] | None:
    """The generated ids that decode to exactly `text` (the message a client sends back), or None."""
    if not text:
        return None
    for k in range(min(MAX_TRAILING, len(token_ids)) + 1):
        ids = token_ids[: len(token_ids) - k]
        if detokenize(ids) == text:
            return tuple(ids)
    return None


def kept_prompt(
    render: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str],
    tokenize: Callable[[str], list[int]],
    reply: Callable[[str], tuple[int, ...] | None],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    text: str,
) -> list[int] | None:
    """The prompt's ids with remembered replies spliced in, or None when none is placed verbatim."""
    found: dict[int, tuple[int, Any, str, tuple[int, ...]]] = {}  # mark -> (message, slot, text, ids)
    for i, message in enumerate(messages):
        for slot, key, original in _slots(message):
            kept = reply(key)
            if kept is not None:
                found[len(found)] = (i, slot, original, kept)
    marked = ""
    for _ in range(2):  # a second pass without the replies the template drops or repeats
        if not found:
            return None
        view = list(messages)
        for mark, (i, slot, _, _) in found.items():
            view[i] = _marked(view[i], slot, MARK.format(mark))
        marked = render(view, tools)
        placed = {mark: entry for mark, entry in found.items() if marked.count(MARK.format(mark)) == 1}
        if placed.keys() == found.keys():
            break
        found = placed
    else:
        return None
    order = sorted(found, key=lambda mark: marked.index(MARK.format(mark)))
    pieces, rest = [], marked
    for mark in order:
        before, rest = rest.split(MARK.format(mark), 1)
        pieces.append(before)
    pieces.append(rest)
    rebuilt = pieces[0] + "".join(found[mark][2] + pieces[j + 1] for j, mark in enumerate(order))
    if rebuilt != text:
        return None
    spans: list[tuple[int, int, tuple[int, ...]]] = []  # where each spliced text sits in `text`
    at = 0
    for j, mark in enumerate(order):
        at += len(pieces[j])
        spans.append((at, at + len(found[mark][2]), found[mark][3]))
        at += len(found[mark][2])
    # The prompt up to each such assistant turn is tokenized alone, as it was when the turn was
    # generated: the later prompt then begins with that one even where the template writes more
    # around the generated text (a tool call's markup).
    cuts = set()
    for i in {found[mark][0] for mark in order}:
        before = render(messages[:i], tools)
        if text.startswith(before) and not any(start < len(before) < end for start, end, _ in spans):
            cuts.add(len(before))
    ids: list[int] = []
    at = 0
    marks: list[tuple[int, int, tuple[int, ...] | None]] = [*spans, *((c, c, None) for c in cuts)]
    for start, end, generated in sorted(marks, key=lambda s: (s[0], s[1])):
        if start > at:
            ids += tokenize(text[at:start])
            at = start
        if generated is not None:
            ids += generated
            at = end
    return ids + tokenize(text[at:])
