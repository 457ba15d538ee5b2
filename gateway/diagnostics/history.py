"""History kept as generated: a later chat prompt reuses the token ids the engine generated for an
assistant message, instead of re-tokenizing its text (which rarely gives the same ids at temperature
1, and so cut the cache at the start of every earlier reply).

A reply is remembered per tenant (store.py), keyed by its text, with the ids whose decoding is
exactly that text. A later request's assistant message with byte-identical text is spliced in when
the chat template places it verbatim: the messages rendered with a marker in place of each such text
must give, with the texts put back, exactly the prompt the template renders. Then the prompt is the
text between the markers tokenized piece by piece, with the generated ids in the gaps; the pieces are
the same from one turn to the next, so every turn's prompt begins with the previous prompt and reply.
A template that transforms the text (strips it, drops a reasoning block) fails that check and the
prompt is tokenized as before; the diagnostics then say `history_rerendered`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

MARK = "\x00radixgate-reply-{}\x00"
MAX_TRAILING = 4  # generated ids past the text (an EOS, a trimmed stop string) dropped at most


def reply_key(message: dict[str, Any]) -> str | None:
    """An assistant message's key, or None when it has no text to match."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, str) or not content:
        return None
    return "text:" + content


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
    found: dict[int, tuple[int, ...]] = {}
    for i, message in enumerate(messages):
        key = reply_key(message)
        ids = reply(key) if key is not None else None
        if ids is not None:
            found[i] = ids
    marked = ""
    for _ in range(2):  # a second pass without the replies the template drops or repeats
        if not found:
            return None
        marked = render([dict(m, content=MARK.format(i)) if i in found else m for i, m in enumerate(messages)], tools)
        placed = {i: ids for i, ids in found.items() if marked.count(MARK.format(i)) == 1}
        if placed.keys() == found.keys():
            break
        found = placed
    else:
        return None
    order = sorted(found, key=lambda i: marked.index(MARK.format(i)))
    pieces, rest = [], marked
    for i in order:
        before, rest = rest.split(MARK.format(i), 1)
        pieces.append(before)
    pieces.append(rest)
    rebuilt = pieces[0] + "".join(messages[i]["content"] + pieces[j + 1] for j, i in enumerate(order))
    if rebuilt != text:
        return None
    ids: list[int] = []
    for j, i in enumerate(order):
        ids += tokenize(pieces[j])
        ids += found[i]
    return ids + tokenize(pieces[-1])
