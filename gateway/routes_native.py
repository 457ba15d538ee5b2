"""SGLang's native endpoints and the operational ones: `/generate`, `/health`, `/flush_cache`,
`/server_info` (alias `/get_server_info`), `/metrics`, `/v1/prompt_stats`, and a debug check."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from . import __version__
from .errors import APIError
from .generation import Job, collect, stream_job
from .native_schemas import FlushCacheResponse, GenerateRequest, GenerateResponse, PromptStatsResponse, ServerInfo
from .openai_schemas import ErrorResponse
from .prompt_stats import RequestTags, estimate_static_tokens
from .responses import DONE, ERRORS, sse, sse_response
from .state import AppState, state_of
from .structured_output import constraint_of, precompile
from .worker import WorkRequest

router = APIRouter()


def _meta(
    rid: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int, finish_reason: str | None, start: float
) -> dict[str, Any]:
    reason: dict[str, Any] | None = None
    if finish_reason is not None:
        reason = {"type": finish_reason}
        if finish_reason == "length":
            reason["length"] = completion_tokens
    return {
        "id": rid,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "cached_tokens": cached_tokens,
        "finish_reason": reason,
        "e2e_latency": time.perf_counter() - start,
    }


@router.post("/generate", response_model=GenerateResponse, responses=ERRORS)
async def generate(body: GenerateRequest, request: Request) -> Any:
    """SGLang's native generation: `text` or `input_ids`, `sampling_params`, `stream`."""
    state = state_of(request)
    tenant = request.state.tenant
    sp = body.sampling_params
    if body.input_ids is not None:
        input_ids, text = list(body.input_ids), None
    else:
        text = body.text or ""
        input_ids = state.worker.tokenize(text)
    tags = RequestTags.from_metadata(body.metadata)
    measured = None
    if text is not None and tags.static_prefix_chars:
        measured = len(state.worker.tokenize(text[: tags.static_prefix_chars]))
    static = estimate_static_tokens(tags.static_prefix_chars, len(text or ""), len(input_ids), measured)
    stop = (sp.stop,) if isinstance(sp.stop, str) else tuple(sp.stop or ())
    rid = body.rid or uuid.uuid4().hex
    work = WorkRequest(
        rid=rid,
        input_ids=input_ids,
        max_new_tokens=sp.max_new_tokens,
        temperature=sp.temperature,
        top_p=sp.top_p,
        top_k=sp.top_k,
        min_p=sp.min_p,
        seed=sp.seed,
        stop=stop,
        stop_token_ids=tuple(sp.stop_token_ids or ()),
        ignore_eos=sp.ignore_eos,
        cache_salt=state.cache_salt(tenant),
        route_hint=tags.static_prefix_hash,
        **(constraint.fields() if (constraint := constraint_of(sp)) else {}),
    )
    job = Job("generate", "generate", tenant, tags, work, static, text)
    await precompile(state.worker, work)
    job.validate(state)
    state.admit(tenant, len(input_ids), "generate")
    start = time.perf_counter()
    if body.stream:
        return sse_response(_generate_stream(state, job, start))
    (out,) = await collect(state, [job], request.is_disconnected)
    return {
        "text": out.text,
        "output_ids": list(out.token_ids),
        "meta_info": _meta(rid, out.prompt_tokens, len(out.token_ids), out.cached_tokens, out.finish_reason, start),
    }


async def _generate_stream(state: AppState, job: Job, start: float) -> AsyncIterator[str]:
    """As SGLang does: each event carries the text so far and the running `meta_info`."""
    text, ids = "", []
    num_prompt = len(job.request.input_ids)
    try:
        async with aclosing(stream_job(state, job)) as deltas:
            async for delta in deltas:
                text += delta.text
                ids.extend(delta.token_ids)
                out = delta.output
                meta = _meta(
                    job.request.rid,
                    num_prompt,
                    len(ids),
                    out.cached_tokens if out else 0,
                    out.finish_reason if out else None,
                    start,
                )
                yield sse({"text": text, "output_ids": ids, "meta_info": meta})
    except APIError as exc:
        yield sse(exc.body())
    yield sse(DONE)


@router.get("/health", responses={503: {"model": ErrorResponse}})
async def health(request: Request) -> dict[str, str]:
    """Liveness (503 once the engine has stopped); the only endpoint that needs no API key."""
    failure = state_of(request).worker.failure()
    if failure:
        raise APIError(503, f"unhealthy: {failure}", code="engine_unavailable", type="server_error")
    return {"status": "ok"}


@router.post("/flush_cache", response_model=FlushCacheResponse, responses=ERRORS)
async def flush_cache(request: Request) -> dict[str, Any]:
    """Drop cached prefixes: with a tenant key only that tenant's, with an admin key (or without
    keys) every one; refused (400) while requests are using them."""
    state = state_of(request)
    role = getattr(request.state, "role", "admin")
    cache_salt = state.cache_salt(request.state.tenant) if role != "admin" else None
    if not await asyncio.to_thread(state.worker.flush_cache, cache_salt):
        raise APIError(
            400, "cannot flush the cache while requests are running; retry when the server is idle", code="cache_busy"
        )
    return {"success": True, "message": "cache flushed" if cache_salt is None else "this tenant's cache flushed"}


def _server_info(request: Request) -> dict[str, Any]:
    state = state_of(request)
    c = state.config
    info: dict[str, Any] = dict(state.stats())
    info.update(
        {
            "model_path": state.worker.model_name,
            "served_model_name": state.model_name,
            "context_len": state.worker.context_len,
            "version": __version__,
            "gateway": {
                "num_queued_requests": state.num_queued,
                "auth_enabled": state.auth.enabled,
                "rate_limit_rpm": c.rate_limit_rpm,
                "rate_limit_tpm": c.rate_limit_tpm,
                "max_queued_requests": c.max_queued_requests,
                "uptime_s": round(time.time() - state.started_at, 3),
            },
        }
    )
    engine_config = getattr(getattr(state.worker, "engine", None), "config", None)
    if engine_config is not None and hasattr(engine_config, "__dataclass_fields__"):
        info["engine_config"] = {k: _plain(getattr(engine_config, k)) for k in engine_config.__dataclass_fields__}
    return info


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


@router.get("/server_info", response_model=ServerInfo, responses=ERRORS)
async def server_info(request: Request) -> dict[str, Any]:
    """Engine and gateway state; top-level `cache_hit_rate` and `token_usage` as in SGLang."""
    return _server_info(request)


@router.get("/get_server_info", response_model=ServerInfo, responses=ERRORS)
async def get_server_info(request: Request) -> dict[str, Any]:
    """Alias of `/server_info`, the name older SGLang clients use."""
    return _server_info(request)


@router.get("/metrics", response_class=Response, responses=ERRORS)
async def metrics(request: Request) -> Response:
    """Prometheus text format."""
    state = state_of(request)
    state.stats()  # also samples the dashboard history
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/prompt_stats", response_model=PromptStatsResponse, responses=ERRORS)
async def prompt_stats(request: Request) -> dict[str, Any]:
    """Per-template hit statistics, no prompt text. With API keys, only the caller's tenant (an admin key: all)."""
    state = state_of(request)
    is_admin = getattr(request.state, "role", "admin") == "admin"
    return state.prompt_stats.snapshot(request.state.tenant if state.auth.enabled and not is_admin else None)


@router.get("/debug/check_idle_invariant", include_in_schema=False)
async def check_idle_invariant(request: Request) -> dict[str, Any]:
    """Only with --enable-debug-endpoints: the engine's no-page-leaked check, for load tests."""
    state = state_of(request)
    if not state.config.enable_debug_endpoints:
        raise APIError(404, "debug endpoints are off; start the server with --enable-debug-endpoints")
    try:
        await asyncio.to_thread(state.worker.check_idle_invariant)
    except AssertionError as exc:
        raise APIError(409, f"idle invariant violated: {exc}", code="invariant_violated") from None
    return {"ok": True, "stats": state.stats()}
