"""Tool calling on `/v1/chat/completions`: what `tools`, `tool_choice` and `parallel_tool_calls`
ask for, the grammar that forces a call, and the output turned into `tool_calls`, whole or streamed.

| tool_choice            | prompt          | output                                   | parsed by               |
|------------------------|-----------------|------------------------------------------|-------------------------|
| `none`                 | tools rendered  | free text                                | nothing                 |
| `auto` (default)       | tools rendered  | free text, maybe the family's call syntax | the model's tool parser |
| `required`             | tools rendered  | grammar: `[{"name": .., "parameters": {..}}, ..]` | JSON                |
| `{"type": "function", "function": {"name": X}}` | tools rendered | grammar: X's arguments object | JSON           |

Forced calls go through the grammar (as vLLM and SGLang do), so their arguments match the
tool's schema whatever the model; `finish_reason` is `tool_calls` whenever calls come back.
A call cut by `max_tokens` comes back as a call, as OpenAI returns it: `finish_reason: "length"`
and the arguments written so far (JSON that may not parse); the grammar's `[{"name": ..` wrapper
and a parser's markup never reach `content`.
Streams follow OpenAI: the first delta of a call carries `index`, `id`, `type` and the function
name with empty arguments, later deltas carry pieces of `arguments`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from ..api.errors import APIError
from ..api.openai_schemas import usage
from ..api.sse import DONE, sse
from ..generation import merge, stream_job
from .tool_parsers import MalformedCall, ToolParser, detect_parser, get_parser, parse_call_array

EMPTY_PARAMETERS = {"type": "object", "properties": {}}
Delta = dict[str, Any]


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": new_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def _functions(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    functions: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function") if tool.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise APIError(400, "each tool must be {'type': 'function', 'function': {'name': ..}}", param="tools")
        params = fn.get("parameters", EMPTY_PARAMETERS)
        if not isinstance(params, dict):
            raise APIError(400, f"tool {fn['name']!r}: 'parameters' must be a JSON schema object", param="tools")
        functions[fn["name"]] = {**fn, "parameters": params or EMPTY_PARAMETERS}
    return functions


@dataclass(frozen=True)
class ToolPlan:
    mode: str  # "none" | "auto" | "required" | "named"
    functions: dict[str, dict[str, Any]]
    parser: ToolParser | None
    named: str | None = None
    parallel: bool = True

    @classmethod
    def of(
        cls, tools: list[dict[str, Any]] | None, tool_choice: Any, parallel: bool, parser: ToolParser | None
    ) -> ToolPlan:
        functions = _functions(tools or [])
        named = None
        if tool_choice is None:
            mode = "auto" if functions else "none"
        elif tool_choice in ("none", "auto", "required"):
            mode = tool_choice
        elif isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict):
            mode, named = "named", tool_choice["function"].get("name")
            if named not in functions:
                raise APIError(400, f"tool_choice names {named!r}, which is not in 'tools'", param="tool_choice")
        else:
            raise APIError(
                400,
                "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ..}}",
                param="tool_choice",
            )
        if mode == "required" and not functions:
            raise APIError(400, "tool_choice 'required' needs at least one tool in 'tools'", param="tool_choice")
        if mode == "auto" and not functions:
            mode = "none"
        return cls(mode, functions, parser if mode == "auto" else None, named, parallel)

    @property
    def is_active(self) -> bool:
        return self.mode != "none"

    def grammar(self) -> tuple[str, str] | None:
        """The (kind, source) that forces a call, for `required` and named tools."""
        if self.mode == "named":
            assert self.named is not None
            return "json_schema", json.dumps(self.functions[self.named]["parameters"])
        if self.mode == "required":
            calls = [
                {
                    "type": "object",
                    "properties": {"name": {"const": name}, "parameters": fn["parameters"]},
                    "required": ["name", "parameters"],
                    "additionalProperties": False,
                }
                for name, fn in self.functions.items()
            ]
            schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": calls}}
            if not self.parallel:
                schema["maxItems"] = 1
            return "json_schema", json.dumps(schema)
        return None

    def result(self, text: str, finish_reason: str) -> tuple[str | None, list[dict[str, Any]], str]:
        """(content, tool_calls, finish_reason) of a finished output. A call cut by the token limit
        is a call with partial arguments (finish_reason `length`); other output that does not hold
        calls comes back as content."""
        is_cut = finish_reason == "length"
        calls: list[dict[str, Any]] = []
        content: str | None = text
        if self.mode == "named":
            assert self.named is not None
            if is_cut or _json_object(text) is not None:
                calls, content = [_call(self.named, text)], None
        elif self.mode == "required":
            try:
                calls = [_call(c.name, c.arguments) for c in parse_call_array(text, self.functions, is_cut=is_cut)]
                content = None
            except MalformedCall:
                content = None if is_cut else text
        elif self.mode == "auto":
            assert self.parser is not None
            parsed = self.parser.parse(text, self.functions, is_cut=is_cut)
            calls = [_call(c.name, c.arguments) for c in parsed.calls]
            has_markup = is_cut and self.parser.hold_from(text) is not None
            content = parsed.content if calls or has_markup else text
        if not self.parallel:
            calls = calls[:1]
        if not calls:
            return content, calls, finish_reason
        return content, calls, ("length" if is_cut else "tool_calls")

    def stream(self) -> ToolStream:
        return ToolStream(self)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def call_deltas(calls: list[dict[str, Any]], first_index: int = 0) -> list[Delta]:
    """Each call as OpenAI streams it: id, type and name with empty arguments, then the arguments."""
    deltas: list[Delta] = []
    for i, call in enumerate(calls, start=first_index):
        fn = call["function"]
        head = {"index": i, "id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": ""}}
        deltas.append({"tool_calls": [head]})
        deltas.append({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
    return deltas


@dataclass
class ToolStream:
    """Turns one choice's text deltas into chat deltas (`content` or `tool_calls`)."""

    plan: ToolPlan
    text: str = ""
    num_sent: int = 0  # characters of `text` already sent as content
    call_id: str | None = None

    def feed(self, piece: str) -> list[Delta]:
        self.text += piece
        plan = self.plan
        if plan.mode == "named":  # the output is the arguments: stream them as they come
            deltas: list[Delta] = []
            if self.call_id is None:
                self.call_id = new_call_id()
                head = {"index": 0, "id": self.call_id, "type": "function"}
                deltas.append({"tool_calls": [{**head, "function": {"name": plan.named, "arguments": ""}}]})
            if piece:
                deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            return deltas
        if plan.mode == "required":
            return []  # a JSON array of calls: sent once it is complete
        if plan.mode == "auto":
            assert plan.parser is not None
            hold = plan.parser.hold_from(self.text)
            end = len(self.text) if hold is None else max(hold, self.num_sent)
        else:
            end = len(self.text)
        if end <= self.num_sent:
            return []
        out, self.num_sent = self.text[self.num_sent : end], end
        return [{"content": out}]

    def finish(self, finish_reason: str) -> tuple[list[Delta], str]:
        """The deltas still owed when the output ends, and the choice's finish_reason."""
        plan = self.plan
        if plan.mode == "named":
            ok = _json_object(self.text) is not None
            return [], "tool_calls" if ok else finish_reason
        rest = self.text[self.num_sent :]
        if plan.mode in ("required", "auto"):
            content, calls, reason = plan.result(rest, finish_reason)
            deltas = [{"content": content}] if content else []
            return deltas + call_deltas(calls), reason
        return ([{"content": rest}] if rest else []), finish_reason


def tool_parser_for(state: Any) -> ToolParser:
    """`--tool-call-parser`, else the parser the model's chat template (or family) implies."""
    name = state.config.tool_call_parser
    if name is None:
        template = getattr(getattr(state.worker, "tokenizer", None), "chat_template", None)
        model_config = getattr(getattr(state.worker, "engine", None), "model_config", None)
        name = detect_parser(
            template if isinstance(template, str) else None, getattr(model_config, "architecture", None)
        )
    return get_parser(name)


def tool_chat_full(plan: ToolPlan, render_full: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """The chat route's whole-response renderer, with each choice's output turned into tool calls."""

    def render(state: Any, outputs: list[Any], response_id: str) -> dict[str, Any]:
        body = render_full(state, outputs, response_id)
        for choice in body["choices"]:
            content, calls, reason = plan.result(choice["message"]["content"] or "", choice["finish_reason"])
            choice["message"] = {"role": "assistant", "content": content}
            if calls:
                choice["message"]["tool_calls"] = calls
            choice["finish_reason"] = reason
        return body

    return render


def tool_chat_stream(
    plan: ToolPlan, chunk_writer: Callable[..., Callable[..., str]]
) -> Callable[..., AsyncIterator[str]]:
    """The chat route's stream renderer for requests with tools: deltas go through a `ToolStream`
    per choice. `chunk_writer` is the route's SSE chunk writer."""

    async def render(state: Any, jobs: list[Any], response_id: str, include_usage: bool) -> AsyncIterator[str]:
        chunk = chunk_writer(state, response_id, "chat.completion.chunk", include_usage)

        def choice(i: int, delta: Delta, reason: str | None = None) -> str:
            return chunk([{"index": i, "delta": delta, "logprobs": None, "finish_reason": reason}])

        for i in range(len(jobs)):
            yield choice(i, {"role": "assistant", "content": ""})
        streams = [plan.stream() for _ in jobs]
        outputs = []
        try:
            async with aclosing(merge([stream_job(state, job) for job in jobs])) as events:
                async for i, delta in events:
                    for piece in streams[i].feed(delta.text) if delta.text else []:
                        yield choice(i, piece)
                    if delta.output is not None:
                        outputs.append(delta.output)
                        pieces, reason = streams[i].finish(delta.output.finish_reason)
                        for piece in pieces:
                            yield choice(i, piece)
                        yield choice(i, {}, reason)
        except APIError as exc:
            yield sse(exc.body())
        if include_usage and outputs:
            total = usage(
                sum(o.prompt_tokens for o in outputs),
                sum(len(o.token_ids) for o in outputs),
                sum(o.cached_tokens for o in outputs),
            )
            yield chunk([], total.model_dump())
        yield sse(DONE)

    return render


def render_messages(worker: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The chat template applied to the messages, or a 400 when they do not fit it (an assistant
    turn's `tool_calls` without a function name, say): a client's mistake, never a 500."""
    for message in messages:
        for call in message.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise APIError(
                    400,
                    "each of an assistant message's tool_calls needs {'function': {'name': .., 'arguments': ..}}",
                    param="messages",
                )
    try:
        return worker.render_chat(messages, tools)
    except Exception as exc:  # jinja2's TemplateError and whatever a template's filters raise
        if isinstance(exc, APIError):
            raise
        raise APIError(
            400, f"the chat template cannot render these messages: {type(exc).__name__}: {exc}", param="messages"
        ) from None
