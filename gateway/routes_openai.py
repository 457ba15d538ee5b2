"""OpenAI endpoints: `/v1/chat/completions`, `/v1/completions`, `/v1/models`."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request

from .errors import APIError
from .generation import Job, collect, merge, run
from .openai_schemas import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessage,
    CompletionRequest,
    CompletionResponse,
    ModelCard,
    ModelList,
    usage,
)
from .prompt_stats import RequestTags, estimate_static_tokens
from .responses import DONE, ERRORS, sse, sse_response
from .state import AppState, state_of
from .worker import Output, WorkRequest

router = APIRouter()
StreamRenderer = Callable[[AppState, list[Job], str, bool], AsyncIterator[str]]
FullRenderer = Callable[[AppState, list[Output], str], dict[str, Any]]


def _reject_unsupported(body: ChatCompletionRequest | CompletionRequest) -> None:
    unsupported = {
        "logprobs": bool(body.logprobs),
        "logit_bias": bool(body.logit_bias),
        "presence_penalty": bool(body.presence_penalty),
        "frequency_penalty": bool(body.frequency_penalty),
    }
    if isinstance(body, CompletionRequest):
        unsupported.update(echo=body.echo, suffix=body.suffix is not None, best_of=(body.best_of or 1) > 1)
    else:
        fmt = (body.response_format or {}).get("type", "text")
        unsupported["response_format"] = fmt != "text"
    for param, is_set in unsupported.items():
        if is_set:
            raise APIError(
                400,
                f"'{param}' is not supported by this server; remove it from the request",
                param=param,
                code="unsupported_parameter",
            )


def _work(
    body: ChatCompletionRequest | CompletionRequest,
    rid: str,
    input_ids: list[int],
    max_tokens: int,
    salt: str | None,
    index: int,
) -> WorkRequest:
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    return WorkRequest(
        rid=rid,
        input_ids=input_ids,
        max_new_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=-1 if body.top_k is None else body.top_k,
        min_p=body.min_p or 0.0,
        seed=None if body.seed is None else body.seed + index,
        stop=stop,
        stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos,
        cache_salt=salt,
        # Where a router sends a prefix no worker holds yet; a single engine ignores it.
        route_hint=getattr(body, "prompt_cache_key", None) or (body.metadata or {}).get("static_prefix_hash"),
    )


def _tenant(request: Request) -> str:
    return request.state.tenant


def _message_text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.type != "text":
            raise APIError(
                400,
                f"content parts of type '{part.type}' are not supported; send text",
                param="messages",
                code="unsupported_content",
            )
        texts.append(part.text or "")
    return "".join(texts)


def _template_message(message: ChatMessage) -> dict[str, Any]:
    """What the chat template sees: role and text, plus the tool fields agents send."""
    out: dict[str, Any] = {"role": message.role, "content": _message_text(message.content)}
    for key in ("name", "tool_call_id", "tool_calls"):
        value = getattr(message, key)
        if value:
            out[key] = value
    return out


async def _respond(
    request: Request,
    state: AppState,
    jobs: list[Job],
    stream: bool,
    include_usage: bool,
    response_id: str,
    render_stream: StreamRenderer,
    render_full: FullRenderer,
) -> Any:
    """Validate, admit, then stream the jobs or wait for all of them."""
    for job in jobs:
        job.validate(state)
    state.admit(jobs[0].tenant, sum(len(j.request.input_ids) for j in jobs), jobs[0].endpoint)
    if stream:
        return sse_response(render_stream(state, jobs, response_id, include_usage))
    return render_full(state, await collect(state, jobs, request.is_disconnected), response_id)


def _usage_of(outputs: list[Output]) -> dict[str, Any]:
    return usage(
        sum(o.prompt_tokens for o in outputs),
        sum(len(o.token_ids) for o in outputs),
        sum(o.cached_tokens for o in outputs),
    ).model_dump()


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=ERRORS)
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    """OpenAI chat completions; the prompt is the tokenizer's chat template applied to `messages`."""
    state = state_of(request)
    state.check_model(body.model)
    _reject_unsupported(body)
    messages = [_template_message(m) for m in body.messages]
    text = state.worker.render_chat(messages, body.tools)
    input_ids = state.worker.tokenize(text, add_special_tokens=False)
    tags = RequestTags.from_metadata(body.metadata)
    content_chars = sum(len(m["content"]) for m in messages)
    static = estimate_static_tokens(tags.static_prefix_chars, content_chars, len(input_ids))
    response_id = f"chatcmpl-{uuid.uuid4().hex}"
    max_tokens = body.max_completion_tokens or body.max_tokens
    if max_tokens is None:
        max_tokens = max(1, min(state.worker.context_len - len(input_ids), 1024))
    salt = state.cache_salt(_tenant(request))
    jobs = [
        Job(
            "chat",
            "chat",
            _tenant(request),
            tags,
            _work(body, f"{response_id}-{i}", input_ids, max_tokens, salt, i),
            static,
            text,
        )
        for i in range(body.n)
    ]
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return await _respond(request, state, jobs, body.stream, include_usage, response_id, _chat_stream, _chat_full)


def _chat_full(state: AppState, outputs: list[Output], response_id: str) -> dict[str, Any]:
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": o.text},
            "logprobs": None,
            "finish_reason": o.finish_reason,
        }
        for i, o in enumerate(outputs)
    ]
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": state.model_name,
        "choices": choices,
        "usage": _usage_of(outputs),
    }


def _chunk_writer(state: AppState, response_id: str, obj: str, include_usage: bool) -> Callable[..., str]:
    """One SSE chunk of a streamed response; with `include_usage` every chunk carries `usage`
    (null until the last), as OpenAI sends it."""
    created, model = int(time.time()), state.model_name

    def chunk(choices: list[dict[str, Any]], usage_body: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {
            "id": response_id,
            "object": obj,
            "created": created,
            "model": model,
            "choices": choices,
        }
        if include_usage:
            body["usage"] = usage_body
        return sse(body)

    return chunk


async def _chat_stream(state: AppState, jobs: list[Job], response_id: str, include_usage: bool) -> AsyncIterator[str]:
    chunk = _chunk_writer(state, response_id, "chat.completion.chunk", include_usage)

    for i in range(len(jobs)):
        yield chunk(
            [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]
        )
    outputs: list[Output] = []
    try:
        async with aclosing(merge([run(state, job) for job in jobs])) as events:
            async for i, delta in events:
                if delta.text:
                    yield chunk(
                        [{"index": i, "delta": {"content": delta.text}, "logprobs": None, "finish_reason": None}]
                    )
                if delta.output is not None:
                    outputs.append(delta.output)
                    yield chunk(
                        [{"index": i, "delta": {}, "logprobs": None, "finish_reason": delta.output.finish_reason}]
                    )
    except APIError as exc:
        yield sse(exc.body())
    if include_usage and outputs:
        yield chunk([], _usage_of(outputs))
    yield sse(DONE)


def _completion_prompts(state: AppState, prompt: Any) -> list[tuple[str | None, list[int]]]:
    if isinstance(prompt, str):
        return [(prompt, state.worker.tokenize(prompt))]
    if not prompt:
        raise APIError(400, "'prompt' is empty; send a string or a list of token ids", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return [(None, list(prompt))]
    if len(prompt) > 64:
        raise APIError(400, "at most 64 prompts per request", param="prompt")
    return [(p, state.worker.tokenize(p)) if isinstance(p, str) else (None, list(p)) for p in prompt]


@router.post("/v1/completions", response_model=CompletionResponse, responses=ERRORS)
async def completions(body: CompletionRequest, request: Request) -> Any:
    """OpenAI legacy completions: a string, a list of strings, or token ids."""
    state = state_of(request)
    state.check_model(body.model)
    _reject_unsupported(body)
    tags = RequestTags.from_metadata(body.metadata)
    response_id = f"cmpl-{uuid.uuid4().hex}"
    salt = state.cache_salt(_tenant(request))
    jobs = []
    for p, (text, input_ids) in enumerate(_completion_prompts(state, body.prompt)):
        measured = None
        if text is not None and tags.static_prefix_chars:
            measured = len(state.worker.tokenize(text[: tags.static_prefix_chars]))
        static = estimate_static_tokens(tags.static_prefix_chars, len(text or ""), len(input_ids), measured)
        for i in range(body.n):
            index = p * body.n + i
            work = _work(body, f"{response_id}-{index}", input_ids, body.max_tokens or 16, salt, i)
            jobs.append(Job("completions", "text_completion", _tenant(request), tags, work, static, text))
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return await _respond(
        request, state, jobs, body.stream, include_usage, response_id, _completion_stream, _completion_full
    )


def _completion_full(state: AppState, outputs: list[Output], response_id: str) -> dict[str, Any]:
    choices = [
        {"index": i, "text": o.text, "logprobs": None, "finish_reason": o.finish_reason} for i, o in enumerate(outputs)
    ]
    return {
        "id": response_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": state.model_name,
        "choices": choices,
        "usage": _usage_of(outputs),
    }


async def _completion_stream(
    state: AppState, jobs: list[Job], response_id: str, include_usage: bool
) -> AsyncIterator[str]:
    chunk = _chunk_writer(state, response_id, "text_completion", include_usage)

    outputs: list[Output] = []
    try:
        async with aclosing(merge([run(state, job) for job in jobs])) as events:
            async for i, delta in events:
                reason = delta.output.finish_reason if delta.output is not None else None
                if delta.text or reason:
                    yield chunk([{"index": i, "text": delta.text, "logprobs": None, "finish_reason": reason}])
                if delta.output is not None:
                    outputs.append(delta.output)
    except APIError as exc:
        yield sse(exc.body())
    if include_usage and outputs:
        yield chunk([], _usage_of(outputs))
    yield sse(DONE)


@router.get("/v1/models", response_model=ModelList, responses=ERRORS)
async def list_models(request: Request) -> dict[str, Any]:
    state = state_of(request)
    card = ModelCard(id=state.model_name, created=int(state.started_at), max_model_len=state.worker.context_len)
    return {"object": "list", "data": [card.model_dump()]}


@router.get("/v1/models/{model:path}", response_model=ModelCard, responses=ERRORS)
async def retrieve_model(model: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    state.check_model(model)
    card = ModelCard(id=state.model_name, created=int(state.started_at), max_model_len=state.worker.context_len)
    return card.model_dump()
