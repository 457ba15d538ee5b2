"""The path every generation takes, whatever the endpoint: admit, stream from the worker,
observe (metrics, trace, per-template stats, dashboard history), and abort on disconnect.

Routes build `Job`s and turn the deltas into their own wire format.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from radixgate.engine.protocol import GenerateOutput, GenerateRequest, StreamDelta

from .api.errors import APIError, from_engine_error
from .api.middleware import DisconnectWatch
from .api.retention import ttl_seconds
from .diagnostics.requests import JobDiagnostics, finish
from .observe.prompt_stats import UNTAGGED, PromptView, RequestTags, template_of
from .observe.telemetry import fail_request_span, finish_request_span, start_request_span, with_current_span
from .state import AppState, request_log
from .tenancy.auth import tenant_weight

T = TypeVar("T")
DISCONNECT_POLL_S = 0.25
# The `template` eviction policy's credit for a returning template's static prefix, in requests:
# the horizon chosen on the router bench's TUNING presets (`radixgate bench retention --part template`).
TEMPLATE_CREDIT_REQUESTS = 128


@dataclass(frozen=True)
class Job:
    """One prompt to generate from, with who sent it and what the SDK said about it."""

    endpoint: str  # "chat" | "completions" | "generate": a metrics label
    operation: str  # GenAI operation name: "chat" | "text_completion" | "generate"
    tenant: str
    tags: RequestTags
    request: GenerateRequest
    static_tokens: int = 0
    prompt_text: str | None = None  # logged only with --log-requests
    # the chat request the prompt was rendered from: where its messages and tools sit (drift segments)
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    diagnostics: JobDiagnostics | None = None  # recorded for cache_diagnostics (diagnostics/requests.py)

    def validate(self, state: AppState) -> None:
        """Reject what the engine would reject, plus outputs that cannot fit the context (as vLLM does).
        An engine that has stopped answers 503 here, before admission, so a router retries elsewhere."""
        failure = state.worker.failure()
        if failure:
            raise APIError(503, f"the engine cannot serve requests: {failure}", code="engine_unavailable")
        try:
            state.worker.validate(self.request)
        except ValueError as exc:
            raise from_engine_error(exc) from None
        if self.tags.static_prefix_ttl is not None:  # a radixgate.Prompt segment's pin=
            ttl_seconds(self.tags.static_prefix_ttl, "metadata.static_prefix_ttl")
        num_prompt, context = len(self.request.input_ids), state.worker.context_len
        max_new_tokens = self.request.sampling.max_new_tokens
        if num_prompt + max_new_tokens > context:
            raise APIError(
                400,
                f"this model's context is {context} tokens, but the request asks for "
                f"{num_prompt + max_new_tokens} ({num_prompt} in the prompt, "
                f"{max_new_tokens} to generate); shorten the prompt or lower max_tokens",
                param="max_tokens",
                code="context_length_exceeded",
            )


def log_job(state: AppState, job: Job) -> None:
    """Prompt text reaches the log only when the operator asked for it with --log-requests."""
    if state.config.log_requests:
        request_log.info(
            "rid=%s tenant=%s template=%s prompt=%r",
            job.request.rid,
            job.tenant,
            job.tags.template,
            job.prompt_text if job.prompt_text is not None else job.request.input_ids,
        )


async def stream_job(state: AppState, job: Job) -> AsyncGenerator[StreamDelta, None]:
    """Stream the job's deltas. The last one carries `output`. Closing this generator aborts the
    engine request (its pages are freed); errors become `APIError`."""
    r, sp = job.request, job.request.sampling
    weight = tenant_weight(job.tenant, state.config.tenant_weights)  # fair shares: the channel's, or the keys file's
    r = r if weight == r.tenant_weight else replace(r, tenant_weight=weight)
    if job.tags.static_prefix_ttl is not None and job.static_tokens > 0:  # pin the SDK's static part
        pin = (job.static_tokens, ttl_seconds(job.tags.static_prefix_ttl, "metadata.static_prefix_ttl"))
        r = replace(r, sampling=replace(sp, cache_pins=(*sp.cache_pins, pin)))
    r = with_template_credit(state, job, r)
    sampling = {"max_tokens": sp.max_new_tokens, "temperature": sp.temperature, "top_p": sp.top_p, "seed": sp.seed}
    span = start_request_span(state.tracer, job.operation, state.model_name, job.tenant, job.tags.template, sampling)
    log_job(state, job)
    start = time.perf_counter()
    first_token_at: float | None = None
    last_token_at = start
    gaps: list[float] = []
    state.num_queued += 1
    is_queued = True
    outcome = "aborted"
    try:
        async with aclosing(with_current_span(span, state.worker.stream(r))) as deltas:
            async for delta in deltas:
                now = time.perf_counter()
                if delta.token_ids:
                    if first_token_at is None:
                        first_token_at = now
                    else:
                        gaps.append(now - last_token_at)
                    last_token_at = now
                if is_queued and (delta.token_ids or delta.finished):
                    state.num_queued -= 1
                    is_queued = False
                if delta.output is not None and getattr(delta.output, "error", None):
                    outcome = "engine_error"  # this request alone failed in the engine; it serves on
                    fail_request_span(span, "request_failed", str(delta.output.error))
                    message = f"the engine failed this request: {delta.output.error}"
                    error = APIError(500, message, code="request_failed")
                    error.is_counted = True
                    raise error
                if delta.output is not None:
                    outcome = "ok"
                    _observe(state, job, delta, span, start, first_token_at, gaps)
                yield delta
    except ValueError as exc:
        outcome = "invalid"
        fail_request_span(span, "invalid_request", str(exc))
        error = from_engine_error(exc)
        error.is_counted = True  # by the `finally` below
        raise error from None
    except RuntimeError as exc:  # the engine's loop has stopped; /health says so too
        outcome = "engine_error"
        fail_request_span(span, "engine_error", str(exc))
        error = APIError(
            503, f"the engine cannot serve requests: {exc}", code="engine_unavailable", type="server_error"
        )
        error.is_counted = True
        raise error from None
    finally:
        if is_queued:
            state.num_queued -= 1
        if outcome != "ok":
            state.metrics.observe_failed(job.endpoint, outcome)
            if outcome == "aborted":
                fail_request_span(span, "aborted", "the client went away or the request was cancelled")


def with_template_credit(state: AppState, job: Job, r: GenerateRequest) -> GenerateRequest:
    """The request with `cache_credit` on its static prefix when its template has come back (a
    finished request of it, this tenant's, measured already) and it set none itself. Given only when
    every worker that could serve it honours the field, so the credit never narrows where it can go."""
    template = template_of(job.tags, r.route_hint).template
    if job.static_tokens <= 0 or template == UNTAGGED or r.sampling.cache_credit:
        return r
    members = getattr(state.worker, "members", None)  # a pool's, else the one co-located worker
    backends = [m.backend for m in members.values()] if members is not None else [state.worker]
    if any("cache_credit" in b.unsupported_fields for b in backends):
        return r
    if state.prompt_stats.requests_of(job.tenant, template) < 1:
        return r
    credit = (job.static_tokens, TEMPLATE_CREDIT_REQUESTS)
    return replace(r, sampling=replace(r.sampling, cache_credit=credit))


def _observe(
    state: AppState,
    job: Job,
    delta: StreamDelta,
    span: Any,
    start: float,
    first_token_at: float | None,
    gaps: list[float],
) -> None:
    out = delta.output
    assert out is not None
    end = time.perf_counter()
    ttft = first_token_at - start if first_token_at is not None else None
    times = out.times or {}
    queue_time = times["scheduled"] - times["arrival"] if "scheduled" in times and "arrival" in times else None
    completion_tokens = len(out.token_ids)
    recomputed_static = max(0, job.static_tokens - out.cached_tokens)
    state.metrics.observe_finished(
        endpoint=job.endpoint,
        template=job.tags.template,
        tenant=job.tenant,
        prompt_tokens=out.prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=out.cached_tokens,
        recomputed_static=recomputed_static,
        ttft=ttft,
        e2e=end - start,
        queue_time=queue_time,
        token_gaps=gaps,
    )
    prompt = PromptView(job.request.input_ids, state.worker.detokenize, job.prompt_text, job.messages, job.tools)
    tags = template_of(job.tags, job.request.route_hint)
    if job.diagnostics is not None:
        missed = finish(
            state.diagnostics,
            state.worker,
            state.model_name,
            job.tenant,
            job.diagnostics,
            job.request.input_ids,
            out.token_ids,
            out.text,
            out.cached_tokens,
        )
        if missed is not None:
            state.metrics.observe_cache_miss(*missed)
    state.prompt_stats.record(job.tenant, tags, out.prompt_tokens, out.cached_tokens, job.static_tokens, ttft, prompt)
    state.history.record(out.prompt_tokens, out.cached_tokens, completion_tokens, ttft, tenant=job.tenant)
    state.sample_usage()
    state.limiter.charge_tokens(job.tenant, completion_tokens)
    finish_request_span(
        state.tracer,
        span,
        model=state.model_name,
        rid=out.rid,
        prompt_tokens=out.prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=out.cached_tokens,
        finish_reason=out.finish_reason,
        times=times,
    )


async def merge(streams: list[AsyncGenerator[T, None]]) -> AsyncGenerator[tuple[int, T], None]:
    """Interleave several streams as `(index, item)`; closing the merge closes every stream."""
    if len(streams) == 1:
        async with aclosing(streams[0]) as only:
            async for item in only:
                yield 0, item
        return
    queue: asyncio.Queue[tuple[int, Any, BaseException | None, bool]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncGenerator[T, None]) -> None:
        try:
            async with aclosing(stream) as items:
                async for item in items:
                    await queue.put((index, item, None, False))
        except Exception as exc:
            await queue.put((index, None, exc, True))
            return
        await queue.put((index, None, None, True))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            index, item, error, done = await queue.get()
            if error is not None:
                raise error
            if done:
                remaining -= 1
                continue
            yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def collect(
    state: AppState, jobs: list[Job], is_disconnected: Callable[[], Awaitable[bool]]
) -> list[GenerateOutput]:
    """Run jobs to completion (non-streaming); a client that leaves aborts all of them."""

    async def gather_outputs() -> list[GenerateOutput]:
        outputs: list[GenerateOutput | None] = [None] * len(jobs)
        async with aclosing(merge([stream_job(state, job) for job in jobs])) as events:
            async for index, delta in events:
                if delta.output is not None:
                    outputs[index] = delta.output
        if any(o is None for o in outputs):
            raise APIError(500, "the engine ended a stream without a result", type="server_error")
        return [o for o in outputs if o is not None]

    return await until_disconnected(gather_outputs(), is_disconnected)


async def until_disconnected(work: Awaitable[T], is_disconnected: Callable[[], Awaitable[bool]]) -> T:
    """Await `work`, cancelling it (and so aborting its engine requests) if the client leaves.

    A `DisconnectWatch`'s check is awaited beside the work, so a request costs no wake-ups while it
    runs; any other check (Starlette's) is polled every `DISCONNECT_POLL_S`."""
    task = asyncio.ensure_future(work)
    watch = getattr(is_disconnected, "__self__", None)
    left = asyncio.ensure_future(watch.wait_disconnected()) if isinstance(watch, DisconnectWatch) else None
    try:
        while True:
            if left is not None:
                await asyncio.wait({task, left}, return_when=asyncio.FIRST_COMPLETED)
                done = task.done()
                has_left = not done  # disconnected, or the server's receive failed: gone either way, as the check says
            else:
                done = bool((await asyncio.wait({task}, timeout=DISCONNECT_POLL_S))[0])
                has_left = not done and await is_disconnected()
            if done:
                return task.result()
            if has_left:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                error = APIError(499, "the client closed the connection", code="client_closed_request")
                error.is_counted = True  # as "aborted", when its streams closed
                raise error
    finally:
        for pending in (task, left):
            if pending is not None:
                pending.cancel()  # a no-op once done; gather then takes a failed receive's exception
                await asyncio.gather(pending, return_exceptions=True)
