"""Pydantic schemas for Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`).

Content blocks stay JSON objects here: `routes_messages.py` reads them block by block so that a
block type radixgate does not serve is a 400 naming it (`messages.2.content.0.type`), as
Anthropic's own validation answers. Unknown top-level fields are kept (`model_extra`) for the
field catalog (`request_fields.py`), which refuses them, as Anthropic does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from radixgate.engine.sampling_fields import INT64_MAX

from ..openai_schemas import refuse_lone_surrogates

Content = str | list[dict[str, Any]]


class MessageParam(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    role: Literal["user", "assistant"]
    content: Content


class _MessagesFields(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    _valid_unicode = model_validator(mode="before")(refuse_lone_surrogates)

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: Content | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    speed: str | None = None


class MessagesRequest(_MessagesFields):
    max_tokens: int = Field(ge=1, le=INT64_MAX)
    stop_sequences: list[str] | None = None
    metadata: dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=1, le=INT64_MAX)
    stream: bool = False


class CountTokensRequest(_MessagesFields):
    pass


class CacheCreation(BaseModel):
    ephemeral_5m_input_tokens: int
    ephemeral_1h_input_tokens: int


class MessagesUsage(BaseModel):
    model_config = ConfigDict(extra="allow")  # `cache_pins` for requests with cache_control (retention.py)
    """`input_tokens + cache_read_input_tokens + cache_creation_input_tokens` is the prompt."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    cache_creation: CacheCreation


class MessageResponse(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    stop_sequence: str | None
    usage: MessagesUsage
    diagnostics: dict[str, Any] | None = None


class TokenCount(BaseModel):
    input_tokens: int


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicError(BaseModel):
    type: Literal["error"] = "error"
    error: AnthropicErrorDetail


ANTHROPIC_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": AnthropicError} for code in (400, 401, 403, 404, 413, 429, 503)
}
