"""SGLang's native endpoints and the operational ones: `/generate`, `/health`, `/flush_cache`,
`/server_info` (alias `/get_server_info`), `/metrics`, `/v1/prompt_stats`, and a debug check."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from radixgate import __version__
from radixgate.engine.protocol import LOGPROB_FIELDS, SamplingParams
from radixgate.engine.protocol import GenerateRequest as EngineRequest

from ..diagnostics.requests import FIELD, parse_ask, result_of, with_diagnostics
from ..features.logprobs import TokenTexts, sglang_logprobs
from ..features.structured_output import constraint_of, precompile
from ..generation import Job, collect, merge, stream_job
from ..observe.prompt_stats import RequestTags, estimate_static_tokens
from ..state import AppState, state_of
from ..tenancy.auth import WORKER_ROLE
from ..workers.worker import normalized
from . import bounds
from .bootstrap_fields import with_bootstrap
from .errors import APIError, redact
from .middleware import disconnect_check
from .native_schemas import FlushCacheResponse, GenerateRequest, GenerateResponse, PromptStatsResponse, ServerInfo
from .openai_schemas import ErrorResponse
from .request_fields import check_fields
from .retention import native_credit, native_pins, pins_answer, priority_of
from .sse import DONE, ERRORS, sse, sse_response

router = APIRouter()


def _meta(
    job: Job, completion_tokens: int, cached_tokens: int, finish_reason: str | None, start: float
) -> dict[str, Any]:
    reason: dict[str, Any] | None = None
    if finish_reason is not None:
        reason = {"type": finish_reason}
        if finish_reason == "length":
            reason["length"] = completion_tokens
    return {
        "id": _client_rid(job.request.rid),
        "prompt_tokens": len(job.request.input_ids),
        "completion_tokens": completion_tokens,
        "cached_tokens": cached_tokens,
        "finish_reason": reason,
        "e2e_latency": time.perf_counter() - start,
    } | ({FIELD: result_of(job)} if finish_reason is not None and job.diagnostics and job.diagnostics.ask else {})


@router.post("/generate", response_model=GenerateResponse | list[GenerateResponse], responses=ERRORS)
async def generate(body: GenerateRequest, request: Request) -> Any:
    """SGLang's native generation: `text` or `input_ids` (one, or a list answered with a list),
    `sampling_params` (with `n`: n answers per prompt), `stream`, and SGLang's logprob fields."""
    state = state_of(request)
    tenant = request.state.tenant
    check_fields("/generate", body.model_dump(exclude_unset=True, exclude={"sampling_params"}))
    sp = body.sampling_params
    check_fields(
        "/generate sampling_params", sp.model_dump(exclude_unset=True), unknown_is_error=True, where="sampling_params."
    )
    ask = parse_ask((body.model_extra or {}).get(FIELD))
    prompts = await _prompts(state, body)
    limit = WORKER_RID_CHARS if getattr(request.state, "role", None) == WORKER_ROLE else MAX_RID_CHARS
    rids = _rids(body.rid, len(prompts) * sp.n, limit)
    held = _hold_rids(request, tenant, rids)  # released when nothing references it any more
    tags = RequestTags.from_metadata(body.metadata)
    jobs = []
    for p, (text, input_ids) in enumerate(prompts):
        measured = None
        if text is not None and tags.static_prefix_chars:
            measured = len(await bounds.off_loop(state.worker.tokenize, text[: tags.static_prefix_chars]))
        static = estimate_static_tokens(tags.static_prefix_chars, len(text or ""), len(input_ids), measured)
        for i in range(sp.n):
            work = _work(state, body, _engine_rid(tenant, rids[p * sp.n + i]), input_ids, tenant, tags, i)
            jobs.append(Job("generate", "generate", tenant, tags, work, static, text))
    jobs = with_diagnostics(state, jobs, ask, [(_client_rid(j.request.rid), 0) for j in jobs])
    jobs = with_bootstrap(request, body, jobs)  # prefill/decode disaggregation
    bounds.check_stop(jobs[0].request, "sampling_params.stop")
    for job in jobs:
        await precompile(state, job.request, tenant, disconnect_check(request))
        job.validate(state)
    state.admit(tenant, sum(len(j.request.input_ids) for j in jobs), "generate")
    start = time.perf_counter()
    texts = TokenTexts(state.worker) if body.return_text_in_logprobs else None
    if body.stream:
        return sse_response(_generate_stream(state, jobs, start, texts, indexed=len(jobs) > 1, held=held))
    outs = await collect(state, jobs, disconnect_check(request))
    answers = [
        {
            "text": out.text,
            "output_ids": list(out.token_ids),
            "meta_info": _meta(job, len(out.token_ids), out.cached_tokens, out.finish_reason, start)
            | _logprob_meta(job, out, texts)
            | pins_answer(out),
        }
        for job, out in zip(jobs, outs, strict=True)
    ]
    return answers if body.is_batch or len(answers) > 1 else answers[0]


async def _prompts(state: AppState, body: GenerateRequest) -> list[tuple[str | None, list[int]]]:
    if body.text == [] or body.input_ids == [] or body.input_ids == [[]]:
        raise APIError(400, "the prompt is empty: send text or at least one token id", param="input_ids")
    if body.text is not None:
        texts = [body.text] if isinstance(body.text, str) else body.text
        for t in texts:  # every prompt refused by its length before any is tokenized
            bounds.check_prompt_chars(len(t), state.worker.context_len, "text")
        return [(t, await bounds.tokenize(state.worker, t, param="text")) for t in texts]
    ids = body.input_ids or []
    if ids and all(isinstance(i, list) for i in ids):
        return [(None, list(one)) for one in ids]  # type: ignore[arg-type]
    return [(None, list(ids))]  # type: ignore[arg-type]


MAX_RID_CHARS = 128  # a client's request id
# On the worker channel the id is a front's: its tenant prefix ("<12 hex>/") and a PD retry's
# "~retryN" come before and after the client's id, which the front held to MAX_RID_CHARS already.
WORKER_RID_CHARS = MAX_RID_CHARS + 13 + 16


def _rids(rid: str | list[str] | None, count: int, limit: int = MAX_RID_CHARS) -> list[str]:
    if isinstance(rid, list):
        if len(rid) != count:
            raise APIError(400, f"'rid' has {len(rid)} ids for {count} requests (prompts x n)", param="rid")
        rids = rid
    else:
        base = rid or uuid.uuid4().hex
        rids = [base] if count == 1 else [f"{base}-{i}" for i in range(count)]
    if any(len(r) > limit for r in rids):
        raise APIError(400, f"each 'rid' must be at most {limit} characters", param="rid")
    if len(set(rids)) != len(rids):
        raise APIError(400, "the ids in 'rid' repeat; give each request its own id", param="rid")
    return rids


class _HeldRids:
    """Holds a request's ids in its tenant's table while something references it (the route, or
    the stream it returns): a stream never iterated lets go of its ids when it is collected."""

    __slots__ = ("__weakref__",)


def _hold_rids(request: Request, tenant: str, rids: list[str]) -> _HeldRids:
    """Request ids are per tenant: one tenant's id never blocks another's. Checked and taken in one
    step on the event loop, so two requests with the same id cannot both pass."""
    table: weakref.WeakValueDictionary[tuple[str, str], _HeldRids] | None = getattr(request.app.state, "rids", None)
    if table is None:
        table = weakref.WeakValueDictionary()
        request.app.state.rids = table
    taken = next((r for r in rids if (tenant, r) in table), None)
    if taken is not None:
        raise APIError(
            400,
            f"request id {taken!r} is already in use by one of your running requests; give each request its own id",
            param="rid",
            code="duplicate_request_id",
        )
    held = _HeldRids()
    for r in rids:
        table[(tenant, r)] = held
    return held


def _engine_rid(tenant: str, rid: str) -> str:
    """The id the engine sees: the client's, inside its tenant's namespace."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:12] + "/" + rid


def _client_rid(engine_rid: str) -> str:
    return engine_rid.split("/", 1)[1]


def _work(
    state: AppState, body: GenerateRequest, rid: str, input_ids: list[int], tenant: str, tags: RequestTags, index: int
) -> EngineRequest:
    """The native encoding as it is: `SamplingParams.from_native`, then choice `index`'s seed and the
    normalized output constraint."""
    sp = body.sampling_params
    native: dict[str, Any] = {name: getattr(body, name) for name in LOGPROB_FIELDS}
    if not body.return_logprob:
        native |= {"top_logprobs_num": 0, "logprob_start_len": -1}
    extra = body.model_extra or {}  # priority and pins: retention.py
    native |= {"priority": priority_of(extra.get("priority")), "cache_pins": native_pins(extra, len(input_ids))}
    native["cache_credit"] = native_credit(extra)
    declared = set(type(sp).model_fields) - {"n"}  # extras are neutral values of refused fields
    values = sp.model_dump(include=declared) | (constraint.fields() if (constraint := constraint_of(sp)) else {})
    if values.get("sampling_seed") is None:
        values.pop("sampling_seed", None)
    try:
        sampling = normalized(SamplingParams.from_native({"sampling_params": values, **native}))
    except ValueError as exc:
        raise APIError(400, str(exc), param="sampling_params", code="invalid_value") from None
    if sampling.seed is not None:
        sampling = replace(sampling, seed=sampling.seed + index)
    return EngineRequest(
        rid, input_ids, sampling, cache_salt=state.cache_salt(tenant), route_hint=tags.static_prefix_hash
    )


def _logprob_meta(job: Job, out: Any, texts: TokenTexts | None) -> dict[str, Any]:
    """SGLang's logprob fields of `meta_info`, when the request asked for them."""
    values = getattr(out, "output_token_logprobs", None)
    if not job.request.sampling.return_logprob or values is None:
        return {}
    tokens, tops = sglang_logprobs(texts, out.token_ids, values, out.output_top_logprobs)
    start = (
        max(job.request.sampling.logprob_start_len, 0)
        if job.request.sampling.logprob_start_len >= 0
        else len(job.request.input_ids)
    )
    prompt_ids = job.request.input_ids[start:]
    in_values = getattr(out, "input_token_logprobs", None) or []
    in_tops = getattr(out, "input_top_logprobs", None) or []
    in_tokens, in_top_lists = sglang_logprobs(texts, prompt_ids, in_values, in_tops)
    return {
        "output_token_logprobs": tokens,
        "output_top_logprobs": tops,
        "input_token_logprobs": in_tokens,
        "input_top_logprobs": in_top_lists,
    }


async def _generate_stream(
    state: AppState, jobs: list[Job], start: float, texts: TokenTexts | None, indexed: bool, held: _HeldRids
) -> AsyncIterator[str]:
    """As SGLang does: each event carries the text so far and the running `meta_info` (with
    `index` when the request made more than one answer)."""
    text = [""] * len(jobs)
    ids: list[list[int]] = [[] for _ in jobs]
    logprobs: list[list[float]] = [[] for _ in jobs]
    tops: list[list[Any]] = [[] for _ in jobs]
    try:
        async with aclosing(merge([stream_job(state, job) for job in jobs])) as events:
            async for i, delta in events:
                text[i] += delta.text
                ids[i].extend(delta.token_ids)
                out = delta.output
                meta = _meta(
                    jobs[i], len(ids[i]), out.cached_tokens if out else 0, out.finish_reason if out else None, start
                )
                if out is not None:
                    meta |= _logprob_meta(jobs[i], out, texts) | pins_answer(out)
                elif jobs[i].request.sampling.return_logprob and delta.token_logprobs is not None:
                    logprobs[i] += delta.token_logprobs
                    tops[i] += delta.top_logprobs or []
                    got, got_tops = sglang_logprobs(texts, ids[i], logprobs[i], tops[i])
                    meta |= {"output_token_logprobs": got, "output_top_logprobs": got_tops}
                event: dict[str, Any] = {"text": text[i], "output_ids": list(ids[i]), "meta_info": meta}
                if indexed:
                    event["index"] = i
                yield sse(event)
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
    """Everyone gets SGLang's numbers (`cache_hit_rate`, `token_usage`, capacity, queue lengths);
    configuration, paths, topology and endpoints only an admin key, the worker channel or a keyless
    (loopback-only) server sees, with credentials masked even then."""
    state = state_of(request)
    c = state.config
    stats = state.stats()
    is_admin = getattr(request.state, "role", "admin") in ("admin", WORKER_ROLE)
    info: dict[str, Any] = dict(stats) if is_admin else {k: v for k, v in stats.items() if _is_number(v)}
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
    if is_admin and engine_config is not None and hasattr(engine_config, "__dataclass_fields__"):
        info["engine_config"] = {k: _plain(getattr(engine_config, k)) for k in engine_config.__dataclass_fields__}
    return redact(info) if is_admin else info


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))  # names, URLs, paths, lists and objects are for admins


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
