"""OpenAI endpoints: `/v1/chat/completions`, `/v1/completions`, `/v1/models`."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from functools import partial
from types import SimpleNamespace
from typing import Any

from fastapi import APIRouter, Request

from radixgate.engine.protocol import GenerateOutput

from ..diagnostics.requests import FIELD, add_to_body, add_to_chunk, asked, chat_prompt, parse_ask, with_diagnostics
from ..features.logprobs import MAX_TOP_LOGPROBS, TokenTexts, chat_logprobs, completion_logprobs
from ..features.structured_output import constrain, constraint_of, precompile
from ..features.tool_calls import ToolPlan, render_messages, tool_chat_full, tool_chat_stream, tool_parser_for
from ..generation import Job, collect, merge, stream_job
from ..observe.prompt_stats import RequestTags, estimate_static_tokens
from ..state import AppState, state_of
from . import bounds
from .bootstrap_fields import with_bootstrap
from .errors import APIError
from .middleware import disconnect_check
from .openai_requests import (
    reject_unsupported,
    system_fingerprint,
    template_message,
    tenant_of,
    work_request,
)
from .openai_schemas import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ModelCard,
    ModelList,
    usage,
)
from .retention import pins_answer
from .sse import DONE, ERRORS, sse, sse_response

router = APIRouter()
StreamRenderer = Callable[..., AsyncIterator[str]]  # (state, jobs, response_id, include_usage)
FullRenderer = Callable[..., dict[str, Any]]  # (state, outputs, response_id)


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
    if stream:  # asking for diagnostics asks for the usage chunk that carries them
        return sse_response(render_stream(state, jobs, response_id, include_usage or asked(jobs)))
    return add_to_body(render_full(state, await collect(state, jobs, disconnect_check(request)), response_id), jobs)


def _usage_of(outputs: list[GenerateOutput]) -> dict[str, Any]:
    return usage(
        sum(o.prompt_tokens for o in outputs),
        sum(len(o.token_ids) for o in outputs),
        sum(o.cached_tokens for o in outputs),
    ).model_dump() | pins_answer(SimpleNamespace(cache_pins=[p for o in outputs for p in o.cache_pins]))


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=ERRORS)
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    """OpenAI chat completions; the prompt is the tokenizer's chat template applied to `messages`."""
    state = state_of(request)
    state.check_model(body.model)
    reject_unsupported(body)
    ask = parse_ask((body.model_extra or {}).get(FIELD))
    plan = ToolPlan.of(body.tools, body.tool_choice, body.parallel_tool_calls, tool_parser_for(state))
    messages = [template_message(m) for m in body.messages]
    bounds.check_prompt_chars(bounds.chat_chars(messages, body.tools), state.worker.context_len, "messages")
    text, input_ids = await chat_prompt(state, render_messages, messages, body.tools, tenant=tenant_of(request))
    tags = RequestTags.from_metadata(body.metadata)
    content_chars = sum(len(m["content"]) for m in messages)
    static = estimate_static_tokens(tags.static_prefix_chars, content_chars, len(input_ids))
    response_id = f"chatcmpl-{uuid.uuid4().hex}"
    max_tokens = body.max_completion_tokens or body.max_tokens
    if max_tokens is None:  # as vLLM: up to the end of the context
        max_tokens = max(1, state.worker.context_len - len(input_ids))
    logprobs = (bool(body.logprobs), body.top_logprobs or 0, -1)
    salt = state.cache_salt(tenant_of(request))
    jobs = [
        Job(
            "chat",
            "chat",
            tenant_of(request),
            tags,
            work_request(body, f"{response_id}-{i}", input_ids, max_tokens, salt, i, logprobs),
            static,
            text,
            messages,
            body.tools,
        )
        for i in range(body.n)
    ]
    named = plan.named if plan.mode == "named" else None
    jobs = with_diagnostics(state, jobs, ask, [(response_id, i) for i in range(body.n)], (messages, body.tools), named)
    jobs = with_bootstrap(request, body, jobs)  # prefill/decode disaggregation
    bounds.check_stop(jobs[0].request, "stop")
    jobs = constrain(jobs, constraint := constraint_of(body, plan.grammar()))
    if constraint is not None:
        await precompile(state, jobs[0].request, tenant_of(request), disconnect_check(request))  # a 400 if it cannot
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    render_stream, render_full = _chat_stream, _chat_full
    if plan.is_active:
        writer = partial(_chunk_writer, jobs=jobs)
        render_stream, render_full = tool_chat_stream(plan, writer), tool_chat_full(plan, _chat_full)
    return await _respond(request, state, jobs, body.stream, include_usage, response_id, render_stream, render_full)


def _chat_full(state: AppState, outputs: list[GenerateOutput], response_id: str) -> dict[str, Any]:
    texts = TokenTexts(state.worker)
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": o.text},
            "logprobs": _chat_logprobs(texts, o.token_ids, o),
            "finish_reason": o.finish_reason,
        }
        for i, o in enumerate(outputs)
    ]
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": state.model_name,
        "system_fingerprint": system_fingerprint(state),
        "choices": choices,
        "usage": _usage_of(outputs),
    }


def _chat_logprobs(texts: TokenTexts, token_ids: list[int], source: Any) -> dict[str, Any] | None:
    """`source`: an output or a stream delta; None unless the request asked for logprobs."""
    values = getattr(source, "output_token_logprobs", None) if source is not None else None
    tops = getattr(source, "output_top_logprobs", None)
    if values is None:  # a delta names them differently
        values, tops = getattr(source, "token_logprobs", None), getattr(source, "top_logprobs", None)
    if values is None or tops is None:
        return None
    return chat_logprobs(texts, token_ids, values, tops, MAX_TOP_LOGPROBS)


def _chunk_writer(
    state: AppState, response_id: str, obj: str, include_usage: bool, jobs: list[Job] | None = None
) -> Callable[..., str]:
    """One SSE chunk of a streamed response; with `include_usage` every chunk carries `usage`
    (null until the last), as OpenAI sends it."""
    created, model, fingerprint = int(time.time()), state.model_name, system_fingerprint(state)

    def chunk(choices: list[dict[str, Any]], usage_body: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {
            "id": response_id,
            "object": obj,
            "created": created,
            "model": model,
            "system_fingerprint": fingerprint,
            "choices": choices,
        }
        if include_usage:
            body["usage"] = usage_body
        add_to_chunk(body, jobs)
        return sse(body)

    return chunk


async def _chat_stream(state: AppState, jobs: list[Job], response_id: str, include_usage: bool) -> AsyncIterator[str]:
    chunk = _chunk_writer(state, response_id, "chat.completion.chunk", include_usage, jobs)

    for i in range(len(jobs)):
        yield chunk(
            [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]
        )
    outputs: list[GenerateOutput] = []
    texts = TokenTexts(state.worker)
    try:
        async with aclosing(merge([stream_job(state, job) for job in jobs])) as events:
            async for i, delta in events:
                logprobs = _chat_logprobs(texts, delta.token_ids, delta) if delta.token_ids else None
                if delta.text or logprobs:
                    yield chunk(
                        [{"index": i, "delta": {"content": delta.text}, "logprobs": logprobs, "finish_reason": None}]
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


async def _completion_prompts(state: AppState, prompt: Any) -> list[tuple[str | None, list[int]]]:
    if isinstance(prompt, str):
        return [(prompt, await bounds.tokenize(state.worker, prompt, param="prompt"))]
    if not prompt:
        raise APIError(400, "'prompt' is empty; send a string or a list of token ids", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return [(None, list(prompt))]
    if len(prompt) > 64:
        raise APIError(400, "at most 64 prompts per request", param="prompt")
    for p in prompt:  # every prompt refused by its length before any is tokenized
        if isinstance(p, str):
            bounds.check_prompt_chars(len(p), state.worker.context_len, "prompt")
    return [
        (p, await bounds.tokenize(state.worker, p, param="prompt")) if isinstance(p, str) else (None, list(p))
        for p in prompt
    ]


@router.post("/v1/completions", response_model=CompletionResponse, responses=ERRORS)
async def completions(body: CompletionRequest, request: Request) -> Any:
    """OpenAI legacy completions: a string, a list of strings, or token ids. `echo` puts the prompt
    before the completion; with `logprobs` every prompt token gets one too (the first null)."""
    state = state_of(request)
    state.check_model(body.model)
    reject_unsupported(body)
    ask = parse_ask((body.model_extra or {}).get(FIELD))
    tags = RequestTags.from_metadata(body.metadata)
    response_id = f"cmpl-{uuid.uuid4().hex}"
    salt = state.cache_salt(tenant_of(request))
    logprobs = (body.logprobs is not None, body.logprobs or 0, 0 if body.echo else -1)
    jobs = []
    for p, (text, input_ids) in enumerate(await _completion_prompts(state, body.prompt)):
        measured = None
        if text is not None and tags.static_prefix_chars:
            measured = len(await bounds.off_loop(state.worker.tokenize, text[: tags.static_prefix_chars]))
        static = estimate_static_tokens(tags.static_prefix_chars, len(text or ""), len(input_ids), measured)
        for i in range(body.n):
            index = p * body.n + i
            work = work_request(body, f"{response_id}-{index}", input_ids, body.max_tokens or 16, salt, i, logprobs)
            jobs.append(Job("completions", "text_completion", tenant_of(request), tags, work, static, text))
    jobs = with_diagnostics(state, jobs, ask, [(response_id, i) for i in range(len(jobs))])
    jobs = with_bootstrap(request, body, jobs)  # prefill/decode disaggregation
    bounds.check_stop(jobs[0].request, "stop")
    jobs = constrain(jobs, constraint := constraint_of(body))
    if constraint is not None:
        await precompile(state, jobs[0].request, tenant_of(request), disconnect_check(request))
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    stream = partial(_completion_stream, echo=body.echo)
    full = partial(_completion_full, jobs=jobs, echo=body.echo)
    return await _respond(request, state, jobs, body.stream, include_usage, response_id, stream, full)


def _prompt_text(state: AppState, job: Job) -> str:
    text = job.prompt_text
    return text if text is not None else state.worker.detokenize(job.request.input_ids)


def _completion_choice_logprobs(
    texts: TokenTexts, job: Job, out: GenerateOutput, echo: bool, text_offset: int = 0
) -> dict[str, Any] | None:
    values = getattr(out, "output_token_logprobs", None)
    tops = getattr(out, "output_top_logprobs", None)
    if values is None or tops is None:
        return None
    num_top = job.request.sampling.top_logprobs_num
    ids = list(out.token_ids)
    if echo:
        ids = job.request.input_ids + ids
        values = list(getattr(out, "input_token_logprobs", None) or []) + list(values)
        tops = list(getattr(out, "input_top_logprobs", None) or []) + list(tops)
    return completion_logprobs(texts, ids, values, tops, num_top, text_offset)


def _completion_full(
    state: AppState, outputs: list[GenerateOutput], response_id: str, *, jobs: list[Job], echo: bool
) -> dict[str, Any]:
    texts = TokenTexts(state.worker)
    choices = []
    for i, (job, o) in enumerate(zip(jobs, outputs, strict=True)):
        prefix = _prompt_text(state, job) if echo else ""
        choices.append(
            {
                "index": i,
                "text": prefix + o.text,
                "logprobs": _completion_choice_logprobs(texts, job, o, echo),
                "finish_reason": o.finish_reason,
            }
        )
    return {
        "id": response_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": state.model_name,
        "system_fingerprint": system_fingerprint(state),
        "choices": choices,
        "usage": _usage_of(outputs),
    }


async def _completion_stream(
    state: AppState, jobs: list[Job], response_id: str, include_usage: bool, *, echo: bool = False
) -> AsyncIterator[str]:
    chunk = _chunk_writer(state, response_id, "text_completion", include_usage, jobs)
    texts = TokenTexts(state.worker)
    offsets = [0] * len(jobs)  # characters sent per choice: each chunk's logprobs continue from there
    if echo:
        for i, job in enumerate(jobs):
            prompt = _prompt_text(state, job)
            offsets[i] = len(prompt)
            yield chunk([{"index": i, "text": prompt, "logprobs": None, "finish_reason": None}])
    outputs: list[GenerateOutput] = []
    try:
        async with aclosing(merge([stream_job(state, job) for job in jobs])) as events:
            async for i, delta in events:
                reason = delta.output.finish_reason if delta.output is not None else None
                values = getattr(delta, "token_logprobs", None)
                tops = getattr(delta, "top_logprobs", None)
                logprobs = None
                if values is not None and tops is not None and delta.token_ids:
                    num_top = jobs[i].request.sampling.top_logprobs_num
                    logprobs = completion_logprobs(texts, delta.token_ids, values, tops, num_top, offsets[i])
                offsets[i] += len(delta.text)
                if delta.text or reason or logprobs:
                    yield chunk([{"index": i, "text": delta.text, "logprobs": logprobs, "finish_reason": reason}])
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
