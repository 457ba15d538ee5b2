"""Tool-call parsers: a model's text in its family's tool-call format -> content plus calls.

`--tool-call-parser` takes SGLang's names (`qwen25`, `llama3`, `mistral`) and vLLM's aliases
(`hermes`, `llama3_json`); without it the parser is chosen from the chat template and the model.

| name                 | what the model writes                                                       |
|----------------------|-----------------------------------------------------------------------------|
| `qwen25` / `hermes`  | `<tool_call>\\n{"name": .., "arguments": {..}}\\n</tool_call>`, one block per call |
| `llama3` / `llama3_json` | `<|python_tag|>` or nothing, then `{"name": .., "parameters": {..}}`, `;` between calls |
| `mistral`            | `[TOOL_CALLS] [{"name": .., "arguments": {..}}, ..]` or `[TOOL_CALLS]name[ARGS]{..}` |

Output that does not parse as the family's format (broken JSON, a tool that was not offered) is
returned whole as content with no calls: never an error. Output cut by the token limit
(`is_cut=True`) inside a call returns that call with the arguments written so far (text that may not
parse as JSON, as OpenAI returns it with `finish_reason: "length"`); a call cut before its name is
known is dropped, and the family's markup never reaches `content`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ParsedToolCall:
    name: str
    arguments: str  # the arguments object as JSON text


@dataclass(frozen=True)
class ParseResult:
    content: str | None  # text outside the calls; None when there is none
    calls: list[ParsedToolCall]


class MalformedCall(ValueError):
    """The text starts a call but it is not one of the family's format."""


def _call_from(obj: Any, tool_names: Collection[str] | None) -> ParsedToolCall:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise MalformedCall("a call is a JSON object with a string 'name'")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError as exc:
            raise MalformedCall("arguments are not JSON") from exc
    if not isinstance(args, dict):
        raise MalformedCall("arguments must be a JSON object")
    if tool_names is not None and obj["name"] not in tool_names:
        raise MalformedCall(f"no tool named {obj['name']!r} was offered")
    return ParsedToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


_NAME_KEY = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)(")?')
_ARGS_KEY = re.compile(r'\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_CALL_HEAD = '{"name":"'


def partial_call(text: str, tool_names: Collection[str] | None) -> ParsedToolCall | None:
    """The call a JSON object cut off by the token limit had begun: its name (written whole, or the
    one offered tool that the part written starts) and its arguments so far. None when no single
    offered tool fits what was written."""
    match = _NAME_KEY.match(text)
    if match is not None:
        written, is_whole, rest = match.group(1), match.group(2) is not None, text[match.end() :]
    elif _CALL_HEAD.startswith("".join(text.split())):  # '{"na', '{', '': the name is not begun
        written, is_whole, rest = "", False, ""
    else:
        return None
    if is_whole:
        try:
            name = json.loads(f'"{written}"')
        except json.JSONDecodeError:
            return None
        names = [name] if tool_names is None or name in tool_names else []
    else:
        names = [n for n in tool_names or () if n.startswith(written)]
    if len(names) != 1:
        return None
    arguments = ""
    key = _ARGS_KEY.match(rest) if is_whole else None
    if key is not None:
        arguments = rest[key.end() :]
        try:  # arguments written whole, the call's own closing brace cut: normalise them
            value, _ = _DECODER.raw_decode(arguments)
            if isinstance(value, dict):
                arguments = json.dumps(value, ensure_ascii=False)
        except json.JSONDecodeError:
            pass
    return ParsedToolCall(names[0], arguments)


def parse_call_array(body: str, tool_names: Collection[str] | None, *, is_cut: bool = False) -> list[ParsedToolCall]:
    """The calls of a JSON array `[{"name": .., "arguments" | "parameters": {..}}, ..]`; with `is_cut`,
    the calls written whole and the one the token limit cut off. Raises `MalformedCall`."""
    if not is_cut:
        try:
            items = json.loads(body)
        except json.JSONDecodeError as exc:
            raise MalformedCall("the calls are not a JSON array") from exc
        if not isinstance(items, list):
            raise MalformedCall("the calls are not a JSON array")
        return [_call_from(item, tool_names) for item in items]
    stripped = body.lstrip()
    if stripped and not stripped.startswith("["):
        raise MalformedCall("the calls are not a JSON array")
    calls: list[ParsedToolCall] = []
    pos = len(body) - len(stripped) + 1
    while True:
        while pos < len(body) and (body[pos].isspace() or body[pos] == ","):
            pos += 1
        if pos >= len(body) or body[pos] == "]":
            first = partial_call("", tool_names) if pos >= len(body) and not calls else None
            return calls + ([first] if first else [])
        try:
            obj, pos = _DECODER.raw_decode(body, pos)
        except json.JSONDecodeError:
            last = partial_call(body[pos:], tool_names)
            return calls + ([last] if last else [])
        calls.append(_call_from(obj, tool_names))


def _offered(name: str, tool_names: Collection[str] | None) -> bool:
    return tool_names is None or name in tool_names


def _partial_marker_at_end(text: str, marker: str) -> int | None:
    """Where a prefix of `marker` that ends `text` starts (a marker still arriving), else None."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return len(text) - n
    return None


def _content(*parts: str) -> str | None:
    text = "".join(parts).strip()
    return text or None


class HermesParser:
    """Qwen 2.5 / Hermes: `<tool_call>` JSON `</tool_call>` blocks, text around them."""

    names = ("qwen25", "hermes")
    start, end = "<tool_call>", "</tool_call>"
    _block = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

    def parse(self, text: str, tool_names: Collection[str] | None = None, *, is_cut: bool = False) -> ParseResult:
        if self.start not in text:
            return ParseResult(_content(text), [])
        try:
            calls = []
            for match in self._block.finditer(text):
                try:
                    calls.append(_call_from(json.loads(match.group(1)), tool_names))
                except json.JSONDecodeError as exc:
                    if not (is_cut and match.end() == len(text) and not match.group(0).endswith(self.end)):
                        raise MalformedCall("a <tool_call> block is not JSON") from exc
                    last = partial_call(match.group(1), tool_names)
                    calls += [last] if last else []
        except MalformedCall:
            return ParseResult(text, [])
        return ParseResult(_content(self._block.sub("", text)), calls)

    def hold_from(self, text: str) -> int | None:
        at = text.find(self.start)
        return at if at >= 0 else _partial_marker_at_end(text, self.start)


class Llama3Parser:
    """Llama 3.1+ JSON tool calls: `<|python_tag|>` (optional) then objects separated by `;`."""

    names = ("llama3", "llama3_json")
    tag = "<|python_tag|>"

    def parse(self, text: str, tool_names: Collection[str] | None = None, *, is_cut: bool = False) -> ParseResult:
        if self.tag in text:
            before, _, body = text.partition(self.tag)
        elif text.lstrip().startswith("{"):
            before, body = "", text
        else:
            return ParseResult(_content(text), [])
        calls: list[ParsedToolCall] = []
        pos = 0
        try:
            while True:
                while pos < len(body) and (body[pos].isspace() or body[pos] == ";"):
                    pos += 1
                if pos == len(body):
                    break
                try:
                    obj, pos = _DECODER.raw_decode(body, pos)
                except json.JSONDecodeError as exc:
                    last = partial_call(body[pos:], tool_names) if is_cut else None
                    if last is None:
                        raise MalformedCall("a call is not JSON") from exc
                    calls.append(last)
                    break
                calls.append(_call_from(obj, tool_names))
        except MalformedCall:
            if is_cut and self.tag in text:  # the tag said a call was coming: it is no content
                return ParseResult(_content(before), calls)
            return ParseResult(text, [])
        return ParseResult(_content(before), calls) if calls else ParseResult(_content(text), [])

    def hold_from(self, text: str) -> int | None:
        at = text.find(self.tag)
        if at >= 0:
            return at
        if not text.strip() or text.lstrip().startswith("{"):
            return 0  # a call may be coming: it is a reply that starts with '{'
        return _partial_marker_at_end(text, self.tag)


class MistralParser:
    """Mistral: `[TOOL_CALLS]` then a JSON array of calls, or `name[ARGS]{...}` per call."""

    names = ("mistral",)
    start = "[TOOL_CALLS]"
    _args = "[ARGS]"

    def parse(self, text: str, tool_names: Collection[str] | None = None, *, is_cut: bool = False) -> ParseResult:
        if self.start not in text:
            return ParseResult(_content(text), [])
        before, _, body = text.partition(self.start)
        chunks = [chunk.strip() for chunk in body.split(self.start)]  # newer templates repeat the marker
        try:
            calls = []
            for i, chunk in enumerate(chunks):
                calls += self._chunk_calls(chunk, tool_names, is_cut and i == len(chunks) - 1)
        except MalformedCall:
            return ParseResult(_content(before), calls) if is_cut else ParseResult(text, [])
        return ParseResult(_content(before), calls)

    def _chunk_calls(self, chunk: str, tool_names: Collection[str] | None, is_cut: bool) -> list[ParsedToolCall]:
        if chunk.startswith("[") or (is_cut and not chunk):
            if is_cut:
                return parse_call_array(chunk, tool_names, is_cut=True)
            try:
                items, end = _DECODER.raw_decode(chunk)
            except json.JSONDecodeError as exc:
                raise MalformedCall("[TOOL_CALLS] is not followed by a JSON array") from exc
            if not isinstance(items, list) or chunk[end:].strip():
                raise MalformedCall("[TOOL_CALLS] is not followed by a JSON array")
            return [_call_from(item, tool_names) for item in items]
        if self._args in chunk:
            name, _, args = chunk.partition(self._args)
            try:
                arguments = json.loads(args)
            except json.JSONDecodeError as exc:
                if not is_cut:
                    raise MalformedCall("[ARGS] is not followed by JSON") from exc
                return [ParsedToolCall(name.strip(), args.strip())] if _offered(name.strip(), tool_names) else []
            return [_call_from({"name": name.strip(), "arguments": arguments}, tool_names)]
        if is_cut:  # cut inside the name
            names = [n for n in tool_names or () if n.startswith(chunk)]
            return [ParsedToolCall(names[0], "")] if len(names) == 1 else []
        raise MalformedCall("[TOOL_CALLS] is followed by neither a JSON array nor name[ARGS]")

    def hold_from(self, text: str) -> int | None:
        at = text.find(self.start)
        return at if at >= 0 else _partial_marker_at_end(text, self.start)


ToolParser = HermesParser | Llama3Parser | MistralParser
_PARSERS: dict[str, type[ToolParser]] = {
    name: cls for cls in (HermesParser, Llama3Parser, MistralParser) for name in cls.names
}
PARSER_NAMES = tuple(_PARSERS)


def get_parser(name: str) -> ToolParser:
    if name not in _PARSERS:
        raise ValueError(f"unknown tool-call parser {name!r}: use one of {', '.join(PARSER_NAMES)}")
    return _PARSERS[name]()


def detect_parser(chat_template: str | None, architecture: str | None = None) -> str:
    """The parser for a model: from the tool-call syntax its chat template teaches, else its family
    (`architecture` as config.json names it, "LlamaForCausalLM" say)."""
    template = chat_template or ""
    if "<tool_call>" in template:
        return "qwen25"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3"
    family = (architecture or "").lower()
    return next((parser for key, parser in (("mistral", "mistral"), ("llama", "llama3")) if key in family), "qwen25")
