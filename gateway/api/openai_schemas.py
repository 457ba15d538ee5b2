"""Pydantic schemas for the OpenAI endpoints (`/v1/chat/completions`, `/v1/completions`, `/v1/models`).

Requests keep unknown top-level fields so the routes can judge them against the catalog in
`request_fields.py`: a known field radixgate does not implement is a 400 naming it, any other
extra is ignored with a warning, as vLLM does. A client's `cache_salt` is ignored: the salt comes
from the tenant, never from the body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from radixgate.engine.sampling_fields import INT64_MAX, SEED_MAX, SEED_MIN, is_utf8

StopField = str | list[str] | None
TokenId = Annotated[int, Field(ge=0)]
Seed = Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)]  # what the engine's torch generator takes


def lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """Where in a JSON value a string (or object key) holds a lone surrogate ("\\ud800" in JSON),
    which no tokenizer can encode: its dotted path, or None when all text is valid Unicode."""
    if isinstance(value, str):
        return None if is_utf8(value) else path or "body"
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and not is_utf8(key):
                return where
            found = lone_surrogate_at(item, where)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = lone_surrogate_at(item, f"{path}.{i}" if path else str(i))
            if found is not None:
                return found
    return None


def refuse_lone_surrogates(data: Any) -> Any:
    """A `mode="before"` model validator for request bodies: 400 naming the field with invalid text."""
    where = lone_surrogate_at(data)
    if where is not None:
        where = where.encode("utf-8", "backslashreplace").decode()  # a key may hold the surrogate
        raise ValueError(
            f"'{where}' is not valid Unicode text: it holds a lone surrogate (an unpaired \\ud800-\\udfff "
            "escape); send the text as UTF-8"
        )
    return data


class _Request(BaseModel):
    # NaN and infinities (Python's JSON reader takes NaN, Infinity and 1e999) are refused everywhere
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class StreamOptions(_Request):
    include_usage: bool = False


class ContentPart(_Request):
    type: str
    text: str | None = None


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class _SamplingFields(_Request):
    """Fields both OpenAI endpoints share; the extras after `user` are SGLang/vLLM extensions.
    Other top-level keys are kept (`model_extra`) for `request_fields.check_fields` to judge."""

    model_config = ConfigDict(extra="allow")
    _valid_unicode = model_validator(mode="before")(refuse_lone_surrogates)

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: StopField = None
    seed: Seed | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    # OpenAI's cache-routing key: requests that share it go to the same cache (a router's hint)
    prompt_cache_key: str | None = Field(default=None, max_length=1024)
    top_k: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    ignore_eos: bool = False
    stop_token_ids: list[TokenId] | None = None
    # constrained decoding: vLLM's extras, SGLang's, and whitespace in JSON (see structured_output.py)
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    json_any_whitespace: bool = False
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=2.0)
    min_tokens: int = Field(default=0, ge=0, le=INT64_MAX)


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    parallel_tool_calls: bool = True


class CompletionRequest(_SamplingFields):
    prompt: str | list[str] | list[TokenId] | list[list[TokenId]]
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=5)
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")  # `cache_pins` when the request asked for pins (retention.py)
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None


class CacheMissReason(BaseModel):
    type: str = Field(
        description="system_changed, tools_changed, messages_changed, model_changed, prompt_changed, "
        "evicted, below_page, history_rerendered, cold, previous_response_not_found or unavailable"
    )
    cache_missed_input_tokens: int
    diverged_at_token: int | None = None
    message_index: int | None = None


class CacheDiagnostics(BaseModel):
    """radixgate extension, when the request sent `cache_diagnostics` (gateway/diagnostics/)."""

    cached_tokens: int
    cache_miss_reason: CacheMissReason | None


def _diagnostics() -> Any:
    return Field(default=None, exclude_if=lambda v: v is None)


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None
    cache_diagnostics: CacheDiagnostics | None = _diagnostics()


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: Usage
    cache_diagnostics: CacheDiagnostics | None = _diagnostics()


class FunctionCallDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    """A piece of a streamed call: `id`, `type` and `name` come in the call's first delta."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = None
    cache_diagnostics: CacheDiagnostics | None = _diagnostics()


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    cache_diagnostics: CacheDiagnostics | None = _diagnostics()


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None
    cache_diagnostics: CacheDiagnostics | None = _diagnostics()


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: Usage | None = None
    cache_diagnostics: CacheDiagnostics | None = _diagnostics()


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "radixgate"
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> Usage:
    """`usage` as OpenAI writes it; `prompt_tokens_details.cached_tokens` is always present."""
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached_tokens),
    )
