"""`radixgate check-template PATH_OR_CHECKPOINT`: does a chat template keep the prefix cache across turns?

A multi-turn conversation hits the cache only when turn N+1's prompt starts with turn N's prompt plus
the reply the model generated. The check renders synthetic conversations (plain, with a tool call, with
reasoning given as `reasoning_content` and inline as `<think>...</think>`) through the template and, at
every assistant reply followed by another message, compares the next prompt with prompt + reply:

- the reply is what the model generated: the message's text as sent (plain and inline reasoning), or
  the template's own rendering of the message as the conversation's last turn (reasoning in its field;
  a tool call with its arguments as an object, as the template asks the model to write them);
- the next prompt renders the history as a client sends it back (OpenAI's shape: tool-call arguments as
  a JSON string, reasoning in `reasoning_content` or inline).

Each place where the next prompt stops extending is a `Break`, named by the construct it falls in:
reasoning dropped from history, a tool call re-serialised, the reply re-rendered, or an earlier
message re-rendered once a reply follows it. Exit status: 0 every turn extends, 1 breaks, 2 the
template could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers.utils.chat_template_utils import render_jinja_template

from ..observe.drift import chat_segments, segment_at

EXCERPT = 40
SYSTEM = "You are a concise assistant for a travel agency."
ARGS = {"city": "Paris", "unit": "celsius"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city today.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "the city"},
                    "unit": {"type": "string", "description": "celsius or fahrenheit"},
                },
                "required": ["city"],
            },
        },
    }
]
REASONING = "The user asks for a capital. France's capital is Paris."
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}


def _conversations() -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]]:
    """name -> (messages, tools); reasoning only on the second reply, so a break names its turn."""
    head = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello!"}]
    first = {"role": "assistant", "content": "Hello, where would you like to go?"}
    ask = {"role": "user", "content": "What is the capital of France?"}
    after = {"role": "user", "content": "Thanks. And of Italy?"}
    return {
        "plain": (head + [first, ask, {"role": "assistant", "content": "Paris."}, after], None),
        "tool-call": (
            head[:1]
            + [
                {"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 degrees, sunny"},
                {"role": "assistant", "content": "It is 18 degrees and sunny in Paris."},
                {"role": "user", "content": "And tomorrow?"},
            ],
            TOOLS,
        ),
        "reasoning-field": (
            head + [first, ask, {"role": "assistant", "content": "Paris.", "reasoning_content": REASONING}, after],
            None,
        ),
        "reasoning-inline": (
            head + [first, ask, {"role": "assistant", "content": f"<think>\n{REASONING}\n</think>\n\nParis."}, after],
            None,
        ),
    }


@dataclass(frozen=True)
class Break:
    """Turn `turn` (the reply's index in the conversation) where the next prompt stops extending."""

    conversation: str
    turn: int
    construct: str
    at_char: int  # in the next prompt
    expected: str  # prompt + reply from there
    rendered: str  # the next prompt from there


@dataclass(frozen=True)
class Report:
    template: str
    turns_checked: int
    breaks: list[Break]
    skipped: dict[str, str]  # conversation -> why the template could not render it


def load_template(where: str) -> tuple[str, dict[str, str]]:
    """The template text and its special tokens from `tiny`, a `.jinja` file, a `tokenizer_config.json`,
    or a checkpoint folder holding either. Raises ValueError saying what was expected."""
    if where == "tiny":
        from radixgate.engine.tiny_tokenizer import CHAT_TEMPLATE, IM_END

        return CHAT_TEMPLATE, {"bos_token": "", "eos_token": IM_END}
    path = Path(where)
    if path.is_dir():
        jinja, config = path / "chat_template.jinja", path / "tokenizer_config.json"
        path = jinja if jinja.is_file() else config
    if not path.is_file():
        raise ValueError(f"{where}: not `tiny`, a .jinja file, a tokenizer_config.json or a checkpoint folder")
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".json":
        return text, {}
    config = json.loads(text)
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if not isinstance(template, str):
        raise ValueError(f"{path}: no chat_template")
    tokens = {}
    for key in ("bos_token", "eos_token"):
        value = config.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            tokens[key] = value
    return template, tokens


def render(template: str, messages: Sequence[dict[str, Any]], tools: Any, generation: bool, tokens: dict) -> str:
    """The template applied as transformers' `apply_chat_template` applies it (its Jinja environment)."""
    kwargs = {"tools": tools} if tools else {}
    out: Any = render_jinja_template(
        [list(messages)], chat_template=template, add_generation_prompt=generation, **kwargs, **tokens
    )
    return str(out[0][0] if isinstance(out, tuple) else out)  # (rendered per conversation, indices)


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _overlap(prompt: str, text: str) -> int:
    """How much of `text`'s start the prompt already ends with (a generation prompt that opens `<think>`)."""
    return next((n for n in range(min(len(prompt), len(text)), 0, -1) if prompt.endswith(text[:n])), 0)


def _as_generated(message: dict[str, Any]) -> dict[str, Any]:
    """The reply as the model wrote it: a tool call's arguments as an object."""
    calls = [
        call | {"function": call["function"] | {"arguments": json.loads(call["function"]["arguments"])}}
        for call in message.get("tool_calls") or ()
    ]
    return message | {"tool_calls": calls} if calls else message


def _construct(
    message: dict[str, Any], expected: str, nxt: str, at: int, earlier: tuple[str, str], segments: Any
) -> str:
    """What the break falls in; `earlier`: the previous prompt without and with its generation prompt."""
    history, prompt = earlier
    if at < len(prompt):
        if prompt.startswith(history) and at >= len(history):
            return "generation prompt rendered differently in history"
        found = segment_at(segments, at)
        if found is not None and found.message_index is None and found.name != "tools":  # the last turn's close
            found = next((s for s in reversed(segments) if s.message_index is not None), found)
        return f"{found.name if found else 'the prompt'} re-rendered once a reply follows it"
    reasoning = message.get("reasoning_content") or ("</think>" in (message.get("content") or "") and REASONING)
    if reasoning and REASONING in expected[at:] and REASONING not in nxt[at:]:
        return "reasoning dropped from history"
    if message.get("tool_calls"):
        return "tool call re-serialised"
    return "reply re-rendered in history"


def check(template: str, tokens: dict[str, str] | None = None, name: str = "template") -> Report:
    tokens = tokens or {}
    breaks: list[Break] = []
    skipped: dict[str, str] = {}
    checked = 0
    for conversation, (messages, tools) in _conversations().items():
        try:
            for k, message in enumerate(messages[:-1]):
                if message["role"] != "assistant":
                    continue
                prompt = render(template, messages[:k], tools, True, tokens)
                if message.get("tool_calls") or message.get("reasoning_content"):
                    reply = render(template, [*messages[:k], _as_generated(message)], tools, False, tokens)
                    if not reply.startswith(prompt):  # the model would have been prompted with other text
                        at = _common(prompt, reply)
                        construct = "the generation prompt differs from how a reply's turn opens"
                        breaks.append(
                            Break(conversation, k, construct, at, prompt[at:][:EXCERPT], reply[at:][:EXCERPT])
                        )
                        checked += 1
                        continue
                    expected = reply
                else:
                    content = message["content"]
                    expected = prompt + content[_overlap(prompt, content) :]
                nxt = render(template, messages[: k + 2], tools, True, tokens)
                checked += 1
                if nxt.startswith(expected):
                    continue
                at = _common(expected, nxt)
                segments = chat_segments(prompt, messages[:k], tools)
                earlier = (render(template, messages[:k], tools, False, tokens), prompt)
                construct = _construct(message, expected, nxt, at, earlier, segments)
                breaks.append(
                    Break(conversation, k, construct, at, expected[at : at + EXCERPT], nxt[at : at + EXCERPT])
                )
        except Exception as exc:  # a template that refuses a conversation (no tools, strict roles)
            skipped[conversation] = f"{type(exc).__name__}: {exc}"
    return Report(name, checked, breaks, skipped)


def format_report(report: Report) -> str:
    lines = [f"check-template {report.template}: {report.turns_checked} replies checked, {len(report.breaks)} break(s)"]
    if report.breaks:
        rows = [("conversation", "turn", "construct", "at char", "prompt + reply", "next prompt")]
        rows += [
            (b.conversation, str(b.turn), b.construct, str(b.at_char), repr(b.expected), repr(b.rendered))
            for b in report.breaks
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for conversation, why in report.skipped.items():
        lines.append(f"skipped {conversation}: the template cannot render it ({why[:160]})")
    if not report.breaks:
        lines.append("every reply is extended by the next prompt: the cache holds across turns")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="radixgate check-template",
        description="Render synthetic multi-turn conversations through a chat template and report every turn "
        "whose next prompt is not the previous prompt plus the reply (what breaks the prefix cache).",
    )
    p.add_argument("template", help="`tiny`, a .jinja file, a tokenizer_config.json, or a checkpoint folder")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    try:
        template, tokens = load_template(args.template)
    except (ValueError, OSError) as exc:
        print(f"radixgate check-template: {exc}", file=sys.stderr)
        return 2
    report = check(template, tokens, args.template)
    if args.json:
        print(
            json.dumps(
                {
                    "template": report.template,
                    "turns_checked": report.turns_checked,
                    "breaks": [b.__dict__ for b in report.breaks],
                    "skipped": report.skipped,
                },
                indent=2,
            )
        )
    else:
        sys.stdout.write(format_report(report))
    return 1 if report.breaks else 0


if __name__ == "__main__":
    sys.exit(main())
