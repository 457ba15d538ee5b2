"""From an OpenAI request body to what the gateway works with: field checks, the `GenerateRequest` per
choice, chat messages as the template sees them, the tenant, and `system_fingerprint`."""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi import Request

from radixgate._wire import STATIC_PREFIX_HASH
from radixgate.engine.protocol import GenerateRequest, SamplingParams

from ..state import AppState
from ..workers.worker import MIN_TOP_P, SAMPLING_EPS
from .errors import APIError, from_engine_error
from .openai_schemas import ChatCompletionRequest, ChatMessage, CompletionRequest
from .request_fields import check_fields
from .retention import options_ttl, priority_of, retention_cap, whole_prompt_pin


def reject_unsupported(body: ChatCompletionRequest | CompletionRequest) -> None:
    """A known field radixgate does not implement is a 400 naming it; other extras are ignored with
    a warning in the log (the catalog is `request_fields.py`)."""
    route = "/v1/chat/completions" if isinstance(body, ChatCompletionRequest) else "/v1/completions"
    check_fields(route, body.model_dump(exclude_unset=True))
    if isinstance(body, ChatCompletionRequest) and body.top_logprobs and not body.logprobs:
        raise APIError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs", code="invalid_value")
    if isinstance(body, CompletionRequest) and body.stream and body.echo and body.logprobs is not None:
        raise APIError(
            400,
            "'echo' with 'logprobs' is not supported when streaming: the prompt's logprobs come with the "
            "whole answer; send stream: false",
            param="echo",
            code="unsupported_parameter",
        )


def logit_bias_pairs(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """OpenAI sends token ids as JSON object keys (strings)."""
    try:
        return tuple((int(k), float(v)) for k, v in (bias or {}).items())
    except ValueError:
        raise APIError(400, "'logit_bias' keys must be token ids", param="logit_bias", code="invalid_value") from None


def system_fingerprint(state: AppState) -> str:
    """Derived from the served model and the engine configuration: it changes when either does."""
    engine_config = getattr(getattr(state.worker, "engine", None), "config", None)
    key = f"{state.model_name}|{state.worker.model_name}|{engine_config!r}"
    return "fp_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def work_request(
    body: ChatCompletionRequest | CompletionRequest,
    rid: str,
    input_ids: list[int],
    max_tokens: int,
    salt: str | None,
    index: int,
    logprobs: tuple[bool, int, int] = (False, 0, -1),
) -> GenerateRequest:
    """The one hand-written translation: an OpenAI body's fields to `SamplingParams`. `logprobs`:
    (return_logprob, top_logprobs_num, logprob_start_len) as the engine takes them."""
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or ())
    top_p = 1.0 if body.top_p is None else body.top_p
    temperature = 1.0 if body.temperature is None else body.temperature
    extra = body.model_extra or {}  # priority and the prompt-cache fields: retention.py
    ttl = options_ttl(extra.get("prompt_cache_options"), allowed=("ttl",))
    pins = whole_prompt_pin(ttl, len(input_ids), retention_cap(extra.get("prompt_cache_retention")))
    try:
        sampling = SamplingParams(
            max_new_tokens=max_tokens,
            temperature=0.0 if temperature < SAMPLING_EPS else temperature,
            top_p=max(top_p, MIN_TOP_P),
            top_k=-1 if body.top_k is None else body.top_k,
            min_p=body.min_p or 0.0,
            seed=None if body.seed is None else body.seed + index,
            stop=stop or None,
            stop_token_ids=list(body.stop_token_ids or ()) or None,
            ignore_eos=body.ignore_eos,
            frequency_penalty=body.frequency_penalty or 0.0,
            presence_penalty=body.presence_penalty or 0.0,
            repetition_penalty=body.repetition_penalty or 1.0,
            logit_bias=dict(logit_bias_pairs(body.logit_bias)) or None,
            min_new_tokens=body.min_tokens,
            return_logprob=logprobs[0],
            top_logprobs_num=logprobs[1],
            logprob_start_len=logprobs[2],
            priority=priority_of(extra.get("priority")),
            cache_pins=pins,
        )
    except ValueError as exc:
        raise from_engine_error(exc) from None
    # Where a router sends a prefix no worker holds yet; a single engine ignores it.
    hint = getattr(body, "prompt_cache_key", None) or (body.metadata or {}).get(STATIC_PREFIX_HASH)
    return GenerateRequest(rid, input_ids, sampling, cache_salt=salt, route_hint=hint)


def tenant_of(request: Request) -> str:
    return request.state.tenant


def message_text(content: Any) -> str:
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


def template_message(message: ChatMessage) -> dict[str, Any]:
    """What the chat template sees: role and text, plus the tool fields agents send."""
    out: dict[str, Any] = {"role": message.role, "content": message_text(message.content)}
    for key in ("name", "tool_call_id", "tool_calls"):
        value = getattr(message, key)
        if value:
            out[key] = value
    return out
