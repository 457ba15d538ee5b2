"""From a Messages request to chat messages: content blocks in prompt order, custom tools,
`tool_choice`, `output_config.format`, and the `cache_control` breakpoints with the prompt tokens
each one ends at (for usage accounting)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from ...features.tool_calls import ToolPlan, tool_parser_for
from ...state import AppState
from ..errors import APIError
from .messages_schemas import CountTokensRequest, MessagesRequest

MAX_BREAKPOINTS = 4
TTLS = ("5m", "1h")
SENTINEL = "\x00radixgate-cut\x00"


@dataclass(frozen=True)
class Piece:
    """One content block in prompt order; `key` groups the blocks of one message (-1: system)."""

    key: int
    role: str
    kind: str  # "text" | "tool_use" | "tool_result"
    data: dict[str, Any]


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise APIError(400, f"'{where}.{j}' must be a content block with a 'type'", param=f"{where}.{j}")
    return list(content)


def _text_of(block: dict[str, Any], where: str) -> str:
    if not isinstance(block.get("text"), str):
        raise APIError(400, f"'{where}.text' must be a string", param=f"{where}.text")
    return block["text"]


def _tool_result_text(block: dict[str, Any], where: str) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content if isinstance(content, list) else [None]):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise APIError(400, f"'{where}.content.{j}': tool results of text only are supported", param=where)
        texts.append(_text_of(part, f"{where}.content.{j}"))
    return "".join(texts)


def pieces_of(body: MessagesRequest | CountTokensRequest) -> list[Piece]:
    """Every block of `system` and `messages`, checked: a block type radixgate does not serve is a 400."""
    pieces = []
    for j, block in enumerate(_blocks(body.system, "system") if body.system is not None else []):
        if block["type"] != "text":
            raise APIError(400, f"system blocks must be text, not '{block['type']}'", param=f"system.{j}.type")
        data = {"text": _text_of(block, f"system.{j}"), "cache_control": block.get("cache_control")}
        pieces.append(Piece(-1, "system", "text", data))
    for i, message in enumerate(body.messages):
        allowed = ("text", "tool_result") if message.role == "user" else ("text", "tool_use")
        for j, block in enumerate(_blocks(message.content, f"messages.{i}.content")):
            where = f"messages.{i}.content.{j}"
            kind = block["type"]
            if kind not in allowed:
                raise APIError(
                    400,
                    f"'{where}.type' is '{kind}': radixgate serves {' and '.join(allowed)} blocks in "
                    f"{message.role} messages (no images, documents, thinking or server tools)",
                    param=f"{where}.type",
                )
            if kind == "text":
                data = {"text": _text_of(block, where)}
            elif kind == "tool_use":
                if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                    raise APIError(400, f"'{where}' needs 'id', 'name' and an 'input' object", param=where)
                arguments = json.dumps(block.get("input", {}))
                data = {"id": str(block.get("id", "")), "name": block["name"], "arguments": arguments}
            else:
                data = {"tool_use_id": str(block.get("tool_use_id", "")), "text": _tool_result_text(block, where)}
            pieces.append(Piece(i, message.role, kind, {**data, "cache_control": block.get("cache_control")}))
    return pieces


def template_messages(pieces: list[Piece]) -> list[dict[str, Any]]:
    """The chat messages the template renders: one per message, a tool message per tool result."""
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    current_key: int | None = None
    for piece in pieces:
        if piece.kind == "tool_result":
            out.append({"role": "tool", "tool_call_id": piece.data["tool_use_id"], "content": piece.data["text"]})
            current = None
            continue
        if current is None or current_key != piece.key:
            current, current_key = {"role": piece.role, "content": ""}, piece.key
            out.append(current)
        if piece.kind == "text":
            current["content"] += piece.data["text"]
        else:
            call = {"id": piece.data["id"], "type": "function"}
            call["function"] = {"name": piece.data["name"], "arguments": piece.data["arguments"]}
            current.setdefault("tool_calls", []).append(call)
    return out


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Anthropic's custom tools as the chat template and `ToolPlan` take them."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") not in (None, "custom"):
            raise APIError(
                400, f"'tools.{i}.type' is '{tool['type']}': server tools are not supported", param=f"tools.{i}.type"
            )
        schema = tool.get("input_schema")
        if not isinstance(tool.get("name"), str) or not isinstance(schema, dict):
            raise APIError(400, f"'tools.{i}' needs 'name' and an 'input_schema' object", param=f"tools.{i}")
        fn = {"name": tool["name"], "description": tool.get("description") or "", "parameters": schema}
        out.append({"type": "function", "function": fn})
    return out


def tool_plan(
    state: AppState, body: MessagesRequest | CountTokensRequest, tools: list[dict[str, Any]] | None
) -> ToolPlan:
    choice = body.tool_choice or {"type": "auto"}
    kind = str(choice.get("type"))
    named: Any = {"auto": "auto", "any": "required", "none": "none"}.get(kind)
    if kind == "tool":
        named = {"type": "function", "function": {"name": choice.get("name")}}
    if named is None:
        raise APIError(400, "'tool_choice.type' must be 'auto', 'any', 'tool' or 'none'", param="tool_choice.type")
    if kind in ("any", "tool") and not tools:
        raise APIError(400, f"tool_choice '{kind}' needs 'tools'", param="tool_choice")
    parallel = not choice.get("disable_parallel_tool_use", False)
    return ToolPlan.of(tools, named, parallel, tool_parser_for(state))


def output_format(body: MessagesRequest | CountTokensRequest) -> dict[str, Any] | None:
    """`output_config.format` as the chat route's `response_format`; `effort` is a 400."""
    config = body.output_config or {}
    for key, value in config.items():
        if key not in ("format", "effort"):
            raise APIError(400, f"'output_config.{key}' is not a field of output_config", param=f"output_config.{key}")
        if key == "effort" and value is not None:
            raise APIError(
                400, "'output_config.effort' is not supported: no reasoning models", param="output_config.effort"
            )
    fmt = config.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise APIError(
            400, "'output_config.format' must be {'type': 'json_schema', 'schema': {..}}", param="output_config.format"
        )
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


@dataclass(frozen=True)
class Breakpoint:
    index: int  # the piece it ends (-1: the end of the tools)
    ttl: str


def breakpoints(body: MessagesRequest | CountTokensRequest, pieces: list[Piece]) -> list[Breakpoint]:
    """The request's cache breakpoints in prompt order (tools, system, messages, then the top-level
    one on the last block), checked as Anthropic checks them."""
    found: list[tuple[str, Any, int]] = []
    for i, tool in enumerate(body.tools or []):
        if tool.get("cache_control") is not None:
            found.append((f"tools.{i}.cache_control", tool["cache_control"], -1))
    for n, piece in enumerate(pieces):
        if piece.data.get("cache_control") is not None:
            where = "system" if piece.key < 0 else f"messages.{piece.key}"
            found.append((f"{where}.content.cache_control", piece.data["cache_control"], n))
    if body.cache_control is not None:
        found.append(("cache_control", body.cache_control, len(pieces) - 1))
    if len(found) > MAX_BREAKPOINTS:
        raise APIError(
            400,
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(found)}.",
            param="cache_control",
        )
    out: list[Breakpoint] = []
    for where, control, index in found:
        if not isinstance(control, dict) or control.get("type") != "ephemeral":
            raise APIError(400, f"'{where}.type' must be 'ephemeral'", param=where)
        ttl = control.get("ttl", "5m")
        if ttl not in TTLS or set(control) - {"type", "ttl"}:
            raise APIError(400, f"'{where}.ttl' must be '5m' or '1h'", param=f"{where}.ttl")
        if ttl == "1h" and any(b.ttl == "5m" for b in out):
            raise APIError(
                400,
                f"'{where}': a ttl='1h' cache_control block must not come after a ttl='5m' one; put longer TTLs first",
                param=where,
            )
        out.append(Breakpoint(index, ttl))
    return out


def breakpoint_tokens(
    state: AppState, pieces: list[Piece], tools: list[dict[str, Any]] | None, full_text: str, points: list[Breakpoint]
) -> list[int]:
    """The prompt tokens up to each breakpoint: the rendered prompt's part that the messages up to
    that block render the same (runs on the text pool)."""
    out = []
    for point in points:
        messages = template_messages(pieces[: point.index + 1]) + [{"role": "user", "content": SENTINEL}]
        try:
            text = state.worker.render_chat(messages, tools)
        except Exception:  # a template that refuses the cut: count the whole prompt
            text = full_text
        shared = os.path.commonprefix([text, full_text]).split(SENTINEL)[0]
        out.append(len(state.worker.tokenize(shared, add_special_tokens=False)))
    return out
