"""Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

The request becomes chat messages for the model's template (`system` first; `tool_use` blocks an
assistant turn's tool calls, `tool_result` blocks tool messages) and runs through the chat path
(`answer.py`): tools and `tool_choice` (`auto`, `any`, `tool`, `none`) are the chat route's
`ToolPlan`, `output_config.format` its grammar. Prompt-template tags travel in headers
(`x-radixgate-prompt-template`, ...: Anthropic's `metadata` takes only `user_id`).

`cache_control` breakpoints are checked as Anthropic checks them (at most 4, `ttl` `5m` or `1h`,
no `1h` after a `5m`) and change only the accounting: `cache_read_input_tokens` are the prompt
tokens the cache served, `cache_creation_input_tokens` the computed ones up to the last breakpoint
(split by TTL in `usage.cache_creation`), `input_tokens` the rest; the three add up to the prompt.
Nothing is pinned: the radix cache keeps prefixes by LRU whatever the TTL.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from radixgate._wire import METADATA_HEADERS

from ...diagnostics.requests import parse_ask, result_of, with_diagnostics
from ...diagnostics.wire import anthropic_diagnostics
from ...observe.prompt_stats import RequestTags
from ...state import AppState, state_of
from .. import bounds
from ..errors import APIError
from ..middleware import disconnect_check
from ..request_fields import check_fields
from ..retention import breakpoint_pins, pins_answer
from ..sse import SSE_HEADERS
from .answer import (
    Block,
    BlockEvent,
    Sampling,
    StreamEnd,
    answer_blocks,
    output_constraint,
    prepare_job,
    render_prompt,
    run_job,
    stream_blocks,
)
from .anthropic_errors import anthropic_body
from .messages_input import (
    breakpoint_tokens,
    breakpoints,
    chat_tools,
    output_format,
    pieces_of,
    template_messages,
    tool_plan,
)
from .messages_schemas import (
    ANTHROPIC_ERRORS,
    CountTokensRequest,
    MessageResponse,
    MessagesRequest,
    TokenCount,
)

router = APIRouter()
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn", "abort": "end_turn"}


def tags_of(request: Request) -> RequestTags:
    headers = request.headers
    return RequestTags.from_metadata({key: headers[name] for key, name in METADATA_HEADERS.items() if name in headers})


def check_body(body: MessagesRequest | CountTokensRequest, route: str) -> None:
    check_fields(route, body.model_dump(exclude_unset=True), unknown_is_error=True)
    for key in getattr(body, "metadata", None) or {}:
        if key != "user_id":
            raise APIError(
                400,
                f"'metadata.{key}': Anthropic's metadata takes only 'user_id'; send prompt tags as "
                f"'{METADATA_HEADERS['prompt_template']}' headers",
                param=f"metadata.{key}",
            )
    for key in getattr(body, "diagnostics", None) or {}:
        if key != "previous_message_id":
            raise APIError(400, f"'diagnostics.{key}' is not a field of diagnostics", param=f"diagnostics.{key}")


async def _prompt(
    state: AppState, body: MessagesRequest | CountTokensRequest, route: str, tenant: str | None = None
) -> Any:
    state.check_model(body.model)
    check_body(body, route)
    pieces = pieces_of(body)
    tools = chat_tools(body.tools)
    plan = tool_plan(state, body, tools)
    fmt = output_format(body)
    points = breakpoints(body, pieces)
    messages = template_messages(pieces)
    if not messages:  # every message had an empty content list
        raise APIError(400, "'messages' hold no content: send at least one message with a text block", param="messages")
    prefill = ""
    if messages[-1]["role"] == "assistant":  # Anthropic's prefill: the answer continues that turn
        if messages[-1].get("tool_calls"):
            raise APIError(400, "a last assistant message may hold text only: its tool_use needs a tool_result")
        prefill = messages.pop()["content"].rstrip()  # Anthropic refuses trailing whitespace; we trim it
    text, input_ids = await render_prompt(state, messages, tools, "messages", prefill, tenant)
    marks = await bounds.off_loop(breakpoint_tokens, state, pieces, tools, text, points) if points else []
    content_chars = sum(len(m["content"]) for m in messages)
    return SimpleNamespace(
        plan=plan,
        fmt=fmt,
        points=points,
        marks=marks,
        text=text,
        input_ids=input_ids,
        content_chars=content_chars,
        messages=messages,
        tools=tools,
    )


@router.post("/v1/messages/count_tokens", response_model=TokenCount, responses=ANTHROPIC_ERRORS)
async def count_tokens(body: CountTokensRequest, request: Request) -> dict[str, Any]:
    """The prompt's tokens as the model's chat template renders it."""
    prompt = await _prompt(state_of(request), body, "/v1/messages/count_tokens")
    return {"input_tokens": len(prompt.input_ids)}


@router.post("/v1/messages", response_model=MessageResponse, responses=ANTHROPIC_ERRORS)
async def create_message(body: MessagesRequest, request: Request) -> Any:
    """Anthropic's Messages API over the chat path; `stream` sends Anthropic's event sequence."""
    state = state_of(request)
    prompt = await _prompt(state, body, "/v1/messages", request.state.tenant)
    pins = breakpoint_pins(prompt.marks, [p.ttl for p in prompt.points])  # each breakpoint's prefix, its ttl
    sampling = Sampling(
        body.max_tokens, body.temperature, body.top_p, body.top_k, tuple(body.stop_sequences or ()), pins
    )
    constraint = output_constraint(prompt.fmt, prompt.plan, "output_config.format")
    job = await prepare_job(
        request,
        state,
        endpoint="messages",
        rid=f"msg_{uuid.uuid4().hex[:24]}",
        input_ids=prompt.input_ids,
        sampling=sampling,
        tags=tags_of(request),
        constraint=constraint,
        prompt_text=prompt.text,
        content_chars=prompt.content_chars,
        stop_param="stop_sequences",
    )
    ask = None
    if body.diagnostics is not None and "previous_message_id" in body.diagnostics:
        ask = parse_ask(body.diagnostics, "diagnostics", "previous_message_id")
    (job,) = with_diagnostics(state, [job], ask, [(job.request.rid, 0)], (prompt.messages, prompt.tools))
    job = replace(job, messages=prompt.messages, tools=prompt.tools)  # drift segments (observe/drift.py)
    writer = MessageWriter(state, job, prompt, body)
    if body.stream:
        return StreamingResponse(writer.stream(job), media_type="text/event-stream", headers=SSE_HEADERS)
    output = await run_job(state, job, disconnect_check(request))
    blocks, reason = answer_blocks(prompt.plan, output)
    return writer.message([content_block(b) for b in blocks], output, reason)


def content_block(block: Block, *, is_start: bool = False) -> dict[str, Any]:
    if block.kind == "text":
        return {"type": "text", "text": "" if is_start else block.text}
    call_id = "toolu_" + block.call_id.removeprefix("call_")
    return {"type": "tool_use", "id": call_id, "name": block.name, "input": {} if is_start else block.input()}


def event(name: str, payload: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"


class MessageWriter:
    """A `Message` body, whole or as Anthropic's stream of events."""

    def __init__(self, state: AppState, job: Any, prompt: Any, body: MessagesRequest) -> None:
        self.state, self.job, self.id, self.prompt, self.body = state, job, job.request.rid, prompt, body

    def usage(self, prompt_tokens: int, cached: int, output_tokens: int) -> dict[str, Any]:
        last = min(max(self.prompt.marks, default=0), prompt_tokens)
        one_hour = min(
            max((m for m, p in zip(self.prompt.marks, self.prompt.points, strict=True) if p.ttl == "1h"), default=0),
            last,
        )
        creation = max(0, last - cached)
        creation_1h = max(0, one_hour - cached)
        return {
            "input_tokens": prompt_tokens - cached - creation,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": creation,
            "cache_creation": {
                "ephemeral_5m_input_tokens": creation - creation_1h,
                "ephemeral_1h_input_tokens": creation_1h,
            },
        }

    def stop_sequence(self, output: Any, reason: str) -> str | None:
        """Which of `stop_sequences` ended the output: it follows the returned text in the decoded ids."""
        stops = self.body.stop_sequences or []
        if reason != "stop" or not stops:
            return None
        tail = self.state.worker.detokenize(output.token_ids)[len(output.text) :]
        return next((s for s in stops if s in tail), None) or next((s for s in stops if output.text.endswith(s)), None)

    def diagnostics(self) -> dict[str, Any] | None:
        """Anthropic's `diagnostics` once the answer is done (diagnostics/wire.py); None before, or unasked."""
        result = result_of(self.job)
        if result is None:
            return None
        messages = self.prompt.messages
        return anthropic_diagnostics(result, has_system=bool(messages) and messages[0]["role"] == "system")

    def message(self, content: list[dict[str, Any]], output: Any, reason: str) -> dict[str, Any]:
        stop_sequence = self.stop_sequence(output, reason)
        stop_reason = "stop_sequence" if stop_sequence is not None else STOP_REASONS.get(reason, "end_turn")
        body = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.state.model_name,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": self.usage(output.prompt_tokens, output.cached_tokens, len(output.token_ids))
            | pins_answer(output),
        }
        if (diagnostics := self.diagnostics()) is not None:
            body["diagnostics"] = diagnostics
        return body

    async def stream(self, job: Any) -> AsyncIterator[str]:
        start = self.message(
            [],
            SimpleNamespace(token_ids=[], text="", prompt_tokens=len(job.request.input_ids), cached_tokens=0),
            "stop",
        )
        start.update(stop_reason=None, stop_sequence=None)
        yield event("message_start", {"type": "message_start", "message": start})
        yield event("ping", {"type": "ping"})
        try:
            async for item in stream_blocks(self.state, job, self.prompt.plan):
                if isinstance(item, StreamEnd):
                    final = self.message([], item.output, item.finish_reason)
                    delta = {"stop_reason": final["stop_reason"], "stop_sequence": final["stop_sequence"]}
                    usage = {k: v for k, v in final["usage"].items() if k != "cache_creation"}
                    payload = {"type": "message_delta", "delta": delta, "usage": usage}
                    if "diagnostics" in final:
                        payload["diagnostics"] = final["diagnostics"]
                    yield event("message_delta", payload)
                    yield event("message_stop", {"type": "message_stop"})
                    return
                yield self._block_event(item)
        except APIError as exc:
            yield event("error", anthropic_body(exc.status, exc.message))

    @staticmethod
    def _block_event(item: BlockEvent) -> str:
        if item.kind == "start":
            block = content_block(item.block, is_start=True)
            return event(
                "content_block_start", {"type": "content_block_start", "index": item.index, "content_block": block}
            )
        if item.kind == "stop":
            return event("content_block_stop", {"type": "content_block_stop", "index": item.index})
        is_text = item.block.kind == "text"
        delta = (
            {"type": "text_delta", "text": item.piece}
            if is_text
            else {"type": "input_json_delta", "partial_json": item.piece}
        )
        return event("content_block_delta", {"type": "content_block_delta", "index": item.index, "delta": delta})
