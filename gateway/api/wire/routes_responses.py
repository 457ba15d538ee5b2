"""OpenAI's Responses API: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`.

Input items become chat messages (`responses_input.py`) and run through the chat path
(`answer.py`): function tools and `tool_choice` are the chat route's `ToolPlan`, `text.format` its
grammar. A response is kept in its tenant's store (`tenancy/response_store.py`) unless
`store: false`; `previous_response_id` continues from it, reusing its token ids.

Prompt-cache fields: `prompt_cache_key` is a routing hint as on chat; `prompt_cache_retention`
(`in_memory`, `24h`) is a maximum, which a cache that never pins meets, so it is accepted;
`prompt_cache_options.ttl` asks for a minimum lifetime, a pin radixgate cannot promise: a 400
naming it. `prompt_cache_options.comparison_response_id` answers `prompt_cache_diagnostics`
`{"type": "unavailable"}`: no cache-miss analysis exists yet.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request

from radixgate._wire import STATIC_PREFIX_HASH

from ...diagnostics.requests import Ask, result_of, with_diagnostics
from ...diagnostics.wire import responses_diagnostics
from ...features.tool_calls import ToolPlan, tool_parser_for
from ...observe.prompt_stats import RequestTags
from ...state import AppState, state_of
from ...tenancy.response_store import ResponseStore, StoredResponse
from ..errors import APIError
from ..middleware import disconnect_check
from ..request_fields import check_fields
from ..retention import options_ttl, pins_answer, retention_cap, whole_prompt_pin
from ..sse import ERRORS, sse_response
from .answer import (
    Block,
    BlockEvent,
    Sampling,
    StreamEnd,
    answer_blocks,
    output_constraint,
    prepare_job,
    run_job,
    stream_blocks,
)
from .responses_input import (
    chat_tool_choice,
    chat_tools,
    input_messages,
    prompt_ids,
    response_format,
    with_instructions,
)
from .responses_schemas import DeletedResponse, ResponseBody, ResponsesRequest, response_usage

router = APIRouter()


def store_of(request: Request) -> ResponseStore:
    return request.app.state.responses


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"Response with id '{response_id}' not found.", param="response_id")


def check_prompt_cache(body: ResponsesRequest) -> bool:
    """The prompt-cache fields judged; True when the request asks for cache diagnostics."""
    options = body.prompt_cache_options or {}
    for key, value in options.items():
        param = f"prompt_cache_options.{key}"
        if key == "mode" and value not in (None, "implicit"):
            raise APIError(400, f"'{param}': only 'implicit' (the whole prompt is cached) is served", param=param)
        if key == "comparison_response_id" and not isinstance(value, (str, type(None))):
            raise APIError(400, f"'{param}' must be a response id", param=param)
        if key not in ("mode", "ttl", "comparison_response_id"):
            raise APIError(400, f"'{param}' is not a field of prompt_cache_options", param=param)
    retention_cap(body.prompt_cache_retention)  # a 400 naming it unless in_memory or 24h
    options_ttl(options)  # a 400 naming ttl and its forms when it is not one
    return options.get("comparison_response_id") is not None


@router.post("/v1/responses", response_model=ResponseBody, responses=ERRORS)
async def create_response(body: ResponsesRequest, request: Request) -> Any:
    """OpenAI's Responses API over the chat path; `stream` sends its typed events."""
    state = state_of(request)
    state.check_model(body.model)
    check_fields("/v1/responses", body.model_dump(exclude_unset=True))
    wants_diagnostics = check_prompt_cache(body)
    if body.input is None and body.previous_response_id is None:
        raise APIError(400, "'input' is required (or a 'previous_response_id' to continue from)", param="input")
    tenant, store = request.state.tenant, store_of(request)
    previous = None
    if body.previous_response_id is not None:
        previous = store.get(tenant, body.previous_response_id)
        if previous is None:
            raise APIError(
                400,
                f"Previous response with id '{body.previous_response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
    tools = chat_tools(body.tools)
    parser = tool_parser_for(state)
    plan = ToolPlan.of(tools, chat_tool_choice(body.tool_choice), body.parallel_tool_calls is not False, parser)
    fmt = response_format(body.text)
    history, text, input_ids = await prompt_ids(state, previous, input_messages(body.input), tools, body.instructions)
    max_tokens = body.max_output_tokens or max(1, state.worker.context_len - len(input_ids))
    response_id = f"resp_{uuid.uuid4().hex}"
    job = await prepare_job(
        request,
        state,
        endpoint="responses",
        rid=response_id,
        input_ids=input_ids,
        sampling=Sampling(
            max_tokens,
            body.temperature,
            body.top_p,
            pins=whole_prompt_pin(
                options_ttl(body.prompt_cache_options), len(input_ids), retention_cap(body.prompt_cache_retention)
            ),
        ),
        tags=RequestTags.from_metadata(body.metadata),
        constraint=output_constraint(fmt, plan, "text.format"),
        route_hint=body.prompt_cache_key or (body.metadata or {}).get(STATIC_PREFIX_HASH),
        prompt_text=text,
        content_chars=sum(len(m.get("content") or "") for m in history) + len(body.instructions or ""),
    )
    ask = Ask((body.prompt_cache_options or {}).get("comparison_response_id")) if wants_diagnostics else None
    chat = (with_instructions(body.instructions, history), tools)
    (job,) = with_diagnostics(state, [job], ask, [(response_id, 0)], chat)
    if job.diagnostics is not None:  # a stored response compares too, after the diagnostics store dropped it

        def stored(rid: str) -> tuple[list[int], list[int]] | None:
            entry = store.get(tenant, rid)
            return (entry.prompt_ids, entry.output_ids) if entry is not None else None

        job.diagnostics.fallback = stored
    job = replace(job, messages=chat[0], tools=chat[1])  # drift segments (observe/drift.py)
    writer = ResponseWriter(state, store, tenant, body, response_id, history, tools, plan, wants_diagnostics)
    writer.job = job
    if body.stream:
        return sse_response(writer.stream(job))
    output = await run_job(state, job, disconnect_check(request))
    blocks, reason = answer_blocks(plan, output)
    return writer.finish(job, output, blocks, reason)


@router.get("/v1/responses/{response_id}", response_model=ResponseBody, responses=ERRORS)
async def retrieve_response(response_id: str, request: Request) -> Any:
    """A stored response of the caller's tenant; any other id (another tenant's too) is a 404."""
    for key in ("stream", "starting_after", "include"):
        if request.query_params.get(key) not in (None, "", "false"):
            raise APIError(400, f"'{key}' is not supported when retrieving a response", param=key)
    found = store_of(request).get(request.state.tenant, response_id)
    if found is None:
        raise _not_found(response_id)
    return found.response


@router.delete("/v1/responses/{response_id}", response_model=DeletedResponse, responses=ERRORS)
async def delete_response(response_id: str, request: Request) -> Any:
    if not store_of(request).delete(request.state.tenant, response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


def _item(block: Block, item_id: str, *, done: bool) -> dict[str, Any]:
    status = "completed" if done else "in_progress"
    if block.kind == "text":
        content = [_part(block.text)] if done else []
        return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": block.call_id,
        "name": block.name,
        "arguments": block.arguments if done else "",
        "status": status,
    }


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _item_id(block: Block) -> str:
    return ("msg_" if block.kind == "text" else "fc_") + uuid.uuid4().hex[:24]


class ResponseWriter:
    """A response body, whole or as the event stream; the finished one goes to the store."""

    def __init__(
        self,
        state: AppState,
        store: ResponseStore,
        tenant: str,
        body: ResponsesRequest,
        response_id: str,
        history: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        plan: ToolPlan,
        wants_diagnostics: bool,
    ) -> None:
        self.state, self.store, self.tenant, self.body, self.id = state, store, tenant, body, response_id
        self.history, self.tools, self.plan, self.wants_diagnostics = history, tools, plan, wants_diagnostics
        self.created_at = int(time.time())
        self.job: Any = None  # its diagnostics, once done, answer `prompt_cache_diagnostics`

    def response(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        b = self.body
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": b.instructions,
            "max_output_tokens": b.max_output_tokens,
            "metadata": b.metadata or {},
            "model": self.state.model_name,
            "output": output,
            "parallel_tool_calls": b.parallel_tool_calls is not False,
            "previous_response_id": b.previous_response_id,
            "prompt_cache_key": b.prompt_cache_key,
            "prompt_cache_retention": b.prompt_cache_retention,
            "store": b.store is not False,
            "temperature": 1.0 if b.temperature is None else b.temperature,
            "text": b.text or {"format": {"type": "text"}},
            "tool_choice": b.tool_choice or "auto",
            "tools": b.tools or [],
            "top_p": 1.0 if b.top_p is None else b.top_p,
            "truncation": "disabled",
            "usage": usage,
            "user": b.user,
        }
        if self.wants_diagnostics:
            body["prompt_cache_diagnostics"] = responses_diagnostics(result_of(self.job) if self.job else None)
        return body

    def finish(
        self, job: Any, output: Any, blocks: list[Block], reason: str, ids: list[str] | None = None
    ) -> dict[str, Any]:
        """The finished body, kept in the store unless `store: false`."""
        ids = ids or [_item_id(b) for b in blocks]
        items = [_item(b, i, done=True) for b, i in zip(blocks, ids, strict=True)]
        usage = response_usage(output.prompt_tokens, output.cached_tokens, len(output.token_ids)) | pins_answer(output)
        body = self.response("incomplete" if reason == "length" else "completed", items, usage)
        if self.body.store is not False:
            text = "".join(b.text for b in blocks if b.kind == "text")
            answer: dict[str, Any] = {"role": "assistant", "content": text}
            calls = [
                {"id": b.call_id, "type": "function", "function": {"name": b.name, "arguments": b.arguments}}
                for b in blocks
                if b.kind == "call"
            ]
            if calls:
                answer["tool_calls"] = calls
            entry = StoredResponse.of(
                body,
                list(job.request.input_ids),
                list(output.token_ids),
                messages=[*self.history, answer],
                tools=self.tools,
                instructions=self.body.instructions,
            )
            self.store.put(self.tenant, self.id, entry)
        return body

    async def stream(self, job: Any) -> AsyncIterator[str]:
        sequence = itertools.count()

        def emit(kind: str, **payload: Any) -> str:
            data = {"type": kind, "sequence_number": next(sequence), **payload}
            return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"

        yield emit("response.created", response=self.response("in_progress", [], None))
        yield emit("response.in_progress", response=self.response("in_progress", [], None))
        ids: list[str] = []
        try:
            async for item in stream_blocks(self.state, job, self.plan):
                if isinstance(item, StreamEnd):
                    body = self.finish(job, item.output, item.blocks, item.finish_reason, ids)
                    yield emit(f"response.{body['status']}", response=body)
                    return
                if item.kind == "start":
                    ids.append(_item_id(item.block))
                for piece in _block_events(item, ids[item.index]):
                    yield emit(piece[0], output_index=item.index, **piece[1])
        except APIError as exc:
            failed = self.response("failed", [], None)
            failed["error"] = {"code": exc.code or "server_error", "message": exc.message}
            yield emit("response.failed", response=failed)


def _block_events(item: BlockEvent, item_id: str) -> list[tuple[str, dict[str, Any]]]:
    block = item.block
    if item.kind == "start":
        added: list[tuple[str, dict[str, Any]]] = [
            ("response.output_item.added", {"item": _item(block, item_id, done=False)})
        ]
        if block.kind == "text":
            added.append(("response.content_part.added", {"item_id": item_id, "content_index": 0, "part": _part("")}))
        return added
    if item.kind == "delta":
        if block.kind == "text":
            return [
                (
                    "response.output_text.delta",
                    {"item_id": item_id, "content_index": 0, "delta": item.piece, "logprobs": []},
                )
            ]
        return [("response.function_call_arguments.delta", {"item_id": item_id, "delta": item.piece})]
    done = _item(block, item_id, done=True)
    if block.kind == "text":
        return [
            ("response.output_text.done", {"item_id": item_id, "content_index": 0, "text": block.text, "logprobs": []}),
            ("response.content_part.done", {"item_id": item_id, "content_index": 0, "part": _part(block.text)}),
            ("response.output_item.done", {"item": done}),
        ]
    return [
        (
            "response.function_call_arguments.done",
            {"item_id": item_id, "name": block.name, "arguments": block.arguments},
        ),
        ("response.output_item.done", {"item": done}),
    ]
