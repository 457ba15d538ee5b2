"""`/v1/embeddings`: OpenAI's schema, the served model's last-token final hidden state,
L2-normalised (vLLM's pooling for decoder models), through the same tenants, limits and metrics
as generation. `input` is a string, a list of strings, a list of token ids or a list of those;
`encoding_format` is `float` or `base64` (little-endian float32, as OpenAI sends it); `dimensions`
only as the model's own size (it cannot shorten its vectors)."""

from __future__ import annotations

import base64
import struct
import time
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Request
from opentelemetry.trace import use_span
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..generation import until_disconnected
from ..observe.telemetry import fail_request_span, finish_request_span, start_request_span
from ..state import AppState, state_of
from ..workers.embeddings import embedder_of
from . import bounds
from .errors import APIError, from_engine_error
from .middleware import disconnect_check
from .openai_requests import tenant_of
from .openai_schemas import refuse_lone_surrogates
from .sse import ERRORS

router = APIRouter()
MAX_INPUTS = 2048  # OpenAI's limit on one request's inputs


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    _valid_unicode = model_validator(mode="before")(refuse_lone_surrogates)
    model: str
    input: Any = Field(description="a string, a list of strings, a list of token ids, or a list of those")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, gt=0)
    user: str | None = None
    add_special_tokens: bool = True  # vLLM's extra: the tokenizer's BOS and the like, as vLLM adds them
    truncate_prompt_tokens: int | None = None  # vLLM's extra, refused (a 400 naming it)
    normalize: bool | None = None  # vLLM's extra: only True (the vectors are always L2-normalised)


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage


def _bad_input(message: str) -> APIError:
    return APIError(400, message, param="input", code="invalid_value")


def split_input(value: Any) -> tuple[list[str] | None, list[list[int]] | None]:
    """(strings, None) or (None, token-id lists); a 400 naming `input` for anything else."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _bad_input("'input' is empty or not a string or list: send a string, strings, or token ids")
    if all(_is_token(v) for v in value):
        return None, [value]
    if len(value) > MAX_INPUTS:
        raise _bad_input(f"'input' has {len(value)} items; send at most {MAX_INPUTS} per request")
    if all(isinstance(v, str) for v in value):
        empty = next((i for i, v in enumerate(value) if not v), None)
        if empty is not None:
            raise _bad_input(f"'input' item {empty} is an empty string: every input needs some text")
        return value, None
    if all(isinstance(v, list) and all(_is_token(t) for t in v) for v in value):
        empty = next((i for i, v in enumerate(value) if not v), None)
        if empty is not None:
            raise _bad_input(f"'input' item {empty} is an empty token list: every input needs a token")
        return None, value
    raise _bad_input(
        "'input' mixes strings and token ids (or holds something else): send a list of strings, "
        "a list of token ids, or a list of token-id lists"
    )


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _encode(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


async def _prompts(state: AppState, body: EmbeddingRequest) -> list[list[int]]:
    texts, token_lists = split_input(body.input)
    worker, context = state.worker, state.worker.context_len
    if texts is not None:
        token_lists = [
            await bounds.tokenize(worker, t, param="input", add_special_tokens=body.add_special_tokens) for t in texts
        ]
    assert token_lists is not None
    for i, ids in enumerate(token_lists):
        if len(ids) > context:
            raise APIError(
                400,
                f"'input' item {i} has {len(ids)} tokens; this model's context is {context} tokens: shorten it",
                param="input",
                code="context_length_exceeded",
            )
    return token_lists


def _check_options(body: EmbeddingRequest) -> None:
    if body.truncate_prompt_tokens is not None:
        raise APIError(
            400,
            "'truncate_prompt_tokens' is not supported: shorten the inputs to the context yourself",
            param="truncate_prompt_tokens",
            code="unsupported_parameter",
        )
    if body.normalize is False:
        raise APIError(
            400,
            "'normalize': false is not supported: the vectors are always L2-normalised",
            param="normalize",
            code="unsupported_parameter",
        )


@router.post("/v1/embeddings", response_model=EmbeddingResponse, responses=ERRORS)
async def embeddings(body: EmbeddingRequest, request: Request) -> dict[str, Any]:
    """One vector per input: the last token's final hidden state, L2-normalised."""
    state = state_of(request)
    state.check_model(body.model)
    _check_options(body)
    embedder = embedder_of(state.worker)
    if embedder is None:
        raise APIError(400, "this server's worker does not serve embeddings", param="model", code="model_not_supported")
    failure = state.worker.failure()
    if failure:
        raise APIError(503, f"the engine cannot serve requests: {failure}", code="engine_unavailable")
    prompts = await _prompts(state, body)
    tenant = tenant_of(request)
    num_tokens = sum(map(len, prompts))
    state.admit(tenant, num_tokens, "embeddings")
    span = start_request_span(state.tracer, "embeddings", state.model_name, tenant, "(embeddings)", {})
    start = time.perf_counter()
    state.num_queued += 1
    try:
        with use_span(span, end_on_exit=False):
            work = embedder.embed(prompts, state.cache_salt(tenant))
            vectors = await until_disconnected(work, disconnect_check(request))
    except ValueError as exc:
        fail_request_span(span, "invalid_request", str(exc))
        state.metrics.observe_failed("embeddings", "invalid")
        error = from_engine_error(exc)
        error.param, error.is_counted = "input", True  # what the engine refuses is in the inputs
        raise error from None
    except RuntimeError as exc:  # the engine's loop has stopped; /health says so too
        fail_request_span(span, "engine_error", str(exc))
        state.metrics.observe_failed("embeddings", "engine_error")
        raise APIError(503, f"the engine cannot serve requests: {exc}", code="engine_unavailable") from None
    finally:
        state.num_queued -= 1
    size = len(vectors[0])
    if body.dimensions is not None and body.dimensions != size:
        fail_request_span(span, "invalid_request", "dimensions")
        raise APIError(
            400,
            f"'dimensions' is {body.dimensions}, but this model's embeddings have {size} and it cannot "
            f"shorten them (it is not a Matryoshka model): leave 'dimensions' out or send {size}",
            param="dimensions",
            code="unsupported_parameter",
        )
    _observe(state, tenant, span, num_tokens, time.perf_counter() - start, len(prompts))
    data = [
        {"object": "embedding", "index": i, "embedding": _encode(v, body.encoding_format)}
        for i, v in enumerate(vectors)
    ]
    usage = {"prompt_tokens": num_tokens, "total_tokens": num_tokens}
    return {"object": "list", "data": data, "model": state.model_name, "usage": usage}


def _observe(state: AppState, tenant: str, span: Any, num_tokens: int, seconds: float, num_inputs: int) -> None:
    """Counted as generation is: the request and its prompt tokens in the metrics, the tenant's history."""
    metrics, model = state.metrics, state.metrics.model_name
    metrics.requests.labels(model, "embeddings", "ok").inc()
    metrics.prompt_tokens.labels(model).inc(num_tokens)
    metrics.e2e.labels(model).observe(seconds)
    state.history.record_embeddings(num_tokens, tenant=tenant)
    rid = f"embd-{uuid.uuid4().hex}"
    span.set_attribute("radixgate.embedding_inputs", num_inputs)
    finish_request_span(
        state.tracer,
        span,
        model=state.model_name,
        rid=rid,
        prompt_tokens=num_tokens,
        completion_tokens=0,
        cached_tokens=0,
        finish_reason="stop",
        times={},
    )
