"""From a Responses request to chat messages and a prompt: input items, function tools,
`tool_choice`, `text.format`, and the continuation of a stored response.

A continuation (`previous_response_id`) reuses the previous request's token ids as they were: the
next prompt is the stored prompt ids, the stored output ids, then the tokens of what the template
puts after the answer (the end of the assistant turn, the new items, the generation prompt). The
template is applied to the whole conversation with a marker in place of the answer and only the
text after the marker is tokenized, so the prefix matches the previous request token for token
(the cache serves all of it) even where the model's own output does not re-tokenize the same.
When `instructions` or `tools` changed, the conversation is rendered anew.
"""

from __future__ import annotations

from typing import Any

from ...features.tool_calls import render_messages
from ...state import AppState
from ...tenancy.response_store import StoredResponse
from .. import bounds
from ..errors import APIError

TEXT_PARTS = ("input_text", "output_text", "text")
SENTINEL = "\x00radixgate-answer\x00"
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"'{where}' must be a string or a list of text parts", param=where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise APIError(
                400,
                f"'{where}.{j}.type' is {kind!r}: radixgate serves text parts only (input_text, output_text)",
                param=f"{where}.{j}.type",
            )
        texts.append(part["text"])
    return "".join(texts)


def input_messages(items: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Input items as chat messages: messages, `function_call` (an assistant turn's tool calls) and
    `function_call_output` (a tool message). Any other item type is a 400 naming it."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        where = f"input.{i}"
        if kind == "message":
            role = ROLES.get(item.get("role"))  # type: ignore[arg-type]
            if role is None:
                raise APIError(
                    400, f"'{where}.role' must be user, assistant, system or developer", param=f"{where}.role"
                )
            out.append({"role": role, "content": _text(item.get("content", ""), f"{where}.content")})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments"), str):
                raise APIError(400, f"'{where}' needs 'call_id', 'name' and 'arguments' (a string)", param=where)
            function = {"name": item["name"], "arguments": item["arguments"]}
            call = {"id": str(item.get("call_id", "")), "type": "function", "function": function}
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": ""})
            out[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            content = _text(item.get("output", ""), f"{where}.output")
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")), "content": content})
        else:
            raise APIError(
                400,
                f"'{where}.type' is '{kind}': radixgate serves message, function_call and function_call_output "
                "items (no reasoning, item references or built-in tool calls)",
                param=f"{where}.type",
            )
    return out


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Function tools as the chat template and `ToolPlan` take them; built-in tools are a 400."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise APIError(
                400,
                f"'tools.{i}.type' is {tool.get('type')!r}: radixgate serves function tools only (no built-in tools)",
                param=f"tools.{i}.type",
            )
        if not isinstance(tool.get("name"), str):
            raise APIError(400, f"'tools.{i}.name' must be a string", param=f"tools.{i}.name")
        fn = {"name": tool["name"], "description": tool.get("description") or ""}
        fn["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise APIError(
        400,
        "'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'name': ..}",
        param="tool_choice",
    )


def response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """`text.format` as the chat route's `response_format`; `text.verbosity` other than medium is a 400."""
    text = text or {}
    for key in text:
        if key not in ("format", "verbosity"):
            raise APIError(400, f"'text.{key}' is not a field of text", param=f"text.{key}")
    if text.get("verbosity") not in (None, "medium"):
        raise APIError(400, "'text.verbosity' is not supported: no reasoning models", param="text.verbosity")
    fmt = text.get("format")
    if fmt is None or not isinstance(fmt, dict) or fmt.get("type", "text") == "text":
        if fmt is not None and not isinstance(fmt, dict):
            raise APIError(400, "'text.format' must be an object", param="text.format")
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt["type"] == "json_schema" and isinstance(fmt.get("schema"), dict):
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name", "output"), "schema": fmt["schema"]}}
    raise APIError(
        400, "'text.format' must be text, json_object or json_schema with a 'schema' object", param="text.format"
    )


def with_instructions(instructions: str | None, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return ([{"role": "system", "content": instructions}] if instructions else []) + messages


def _continuation_ids(
    state: AppState, previous: StoredResponse, new: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[int] | None:
    """The stored ids, then the tokens the template writes after the stored answer (text pool)."""
    history = [*previous.messages[:-1], {"role": "assistant", "content": SENTINEL}, *new]
    text = render_messages(state.worker, with_instructions(previous.instructions, history), tools)
    if text.count(SENTINEL) != 1:
        return None
    suffix = state.worker.tokenize(text.split(SENTINEL, 1)[1], add_special_tokens=False)
    output = previous.output_ids
    if output and suffix and output[-1] == suffix[0]:  # the end-of-turn token the model wrote itself
        suffix = suffix[1:]
    return [*previous.prompt_ids, *output, *suffix]


async def prompt_ids(
    state: AppState,
    previous: StoredResponse | None,
    new: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    instructions: str | None,
) -> tuple[list[dict[str, Any]], str | None, list[int]]:
    """(the conversation's messages without instructions, the prompt text when rendered, its ids)."""
    history = [*(previous.messages if previous is not None else []), *new]
    bounds.check_prompt_chars(
        bounds.chat_chars(with_instructions(instructions, history), tools), state.worker.context_len, "input"
    )
    if previous is not None and previous.tools == tools and previous.instructions == instructions:
        ids = await bounds.off_loop(_continuation_ids, state, previous, new, tools)
        if ids is not None:
            return history, None, ids
    text = await bounds.off_loop(render_messages, state.worker, with_instructions(instructions, history), tools)
    return history, text, await bounds.tokenize(state.worker, text, param="input", add_special_tokens=False)
