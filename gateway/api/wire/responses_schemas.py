"""Pydantic schemas for OpenAI's Responses API (`/v1/responses`).

Input items, tools and `text` stay JSON objects here: `responses_input.py` reads them item by item
so that an item or tool type radixgate does not serve is a 400 naming it (`input.3.type`). Unknown
top-level fields are kept (`model_extra`) for the field catalog (`request_fields.py`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from radixgate.engine.sampling_fields import INT64_MAX

from ..openai_schemas import refuse_lone_surrogates


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    _valid_unicode = model_validator(mode="before")(refuse_lone_surrogates)

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    previous_response_id: str | None = Field(default=None, max_length=256)
    store: bool | None = None
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = Field(default=None, max_length=1024)
    prompt_cache_options: dict[str, Any] | None = None
    prompt_cache_retention: str | None = None
    user: str | None = None
    safety_identifier: str | None = None


class InputTokensDetails(BaseModel):
    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int


class ResponseUsage(BaseModel):
    model_config = ConfigDict(extra="allow")  # `cache_pins` with prompt_cache_options.ttl (retention.py)
    """As the openai package types it: `input_tokens` counts the cached ones too."""

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: str
    model: str
    output: list[dict[str, Any]]
    parallel_tool_calls: bool
    tool_choice: Any
    tools: list[dict[str, Any]]
    usage: ResponseUsage | None = None


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool


def response_usage(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    """Every prompt token the engine computed is written to the radix cache (`cache_write_tokens`)."""
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": prompt_tokens - cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + output_tokens,
    }
