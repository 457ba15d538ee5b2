"""Pydantic schemas for SGLang's native endpoints (`/generate`, `/server_info`, `/flush_cache`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from radixgate._wire import TemplateStats

TokenId = Annotated[int, Field(ge=0)]


class NativeSamplingParams(BaseModel):
    """SGLang's `sampling_params` object (the subset this engine implements)."""

    model_config = ConfigDict(extra="ignore")
    max_new_tokens: int = Field(default=128, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=-1, ge=-1)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    # constrained decoding (SGLang's names): at most one; JSON is compact unless json_any_whitespace
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    json_any_whitespace: bool = False


class GenerateRequest(BaseModel):
    """`text` or `input_ids`, exactly one of them."""

    model_config = ConfigDict(extra="ignore")
    text: str | None = None
    input_ids: list[TokenId] | None = None
    sampling_params: NativeSamplingParams = Field(default_factory=NativeSamplingParams)
    stream: bool = False
    rid: str | None = Field(default=None, max_length=128)
    metadata: dict[str, str] | None = None

    @model_validator(mode="after")
    def _one_prompt(self) -> GenerateRequest:
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("send exactly one of 'text' or 'input_ids'")
        return self


class MetaInfo(BaseModel):
    id: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    finish_reason: dict[str, Any] | None
    e2e_latency: float | None = None


class GenerateResponse(BaseModel):
    text: str
    output_ids: list[int]
    meta_info: MetaInfo


class FlushCacheResponse(BaseModel):
    success: bool
    message: str


class PromptStatsResponse(BaseModel):
    """`/v1/prompt_stats`: one row per template (`radixgate._wire.TemplateStats`, no prompt text)."""

    templates: list[TemplateStats]


class ServerInfo(BaseModel):
    """`/server_info`: the engine's stats at top level (SGLang's shape) plus gateway settings."""

    model_config = ConfigDict(extra="allow")
    cache_hit_rate: float
    token_usage: float
    max_total_num_tokens: int
    num_running_reqs: int
    num_waiting_reqs: int
    served_model_name: str
    context_len: int
