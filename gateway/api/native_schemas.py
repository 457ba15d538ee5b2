"""Pydantic schemas for SGLang's native endpoints (`/generate`, `/server_info`, `/flush_cache`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from radixgate._wire import TemplateStats
from radixgate.engine.sampling_fields import INT64_MAX

from .openai_schemas import CacheDiagnostics, Seed, refuse_lone_surrogates

TokenId = Annotated[int, Field(ge=0)]


class NativeSamplingParams(BaseModel):
    """SGLang's `sampling_params` object. Keys SGLang defines but radixgate does not implement are
    kept as extras, for `request_fields.check_fields` to refuse by name (a key SGLang does not
    define is a 400 too, as SGLang answers)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)  # no NaN or infinite numbers
    max_new_tokens: int = Field(default=128, ge=1, le=INT64_MAX)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=-1, ge=-1, le=INT64_MAX)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    # constrained decoding (SGLang's names): at most one; JSON is compact unless json_any_whitespace
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    json_any_whitespace: bool = False
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0, le=2.0)
    min_new_tokens: int = Field(default=0, ge=0, le=INT64_MAX)
    n: int = Field(default=1, ge=1, le=16)
    logit_bias: dict[str, float] | None = None
    sampling_seed: Seed | None = None  # SGLang's name; `seed` is radixgate's alias
    skip_special_tokens: bool = True


class GenerateRequest(BaseModel):
    """`text` or `input_ids`, exactly one of them: one prompt, or a list (answered with a list)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    _valid_unicode = model_validator(mode="before")(refuse_lone_surrogates)
    text: str | list[str] | None = None
    input_ids: list[TokenId] | list[list[TokenId]] | None = None
    sampling_params: NativeSamplingParams = Field(default_factory=NativeSamplingParams)
    stream: bool = False
    rid: str | list[str] | None = None
    metadata: dict[str, str] | None = None
    return_logprob: bool = False
    logprob_start_len: int = Field(default=-1, ge=-1)
    top_logprobs_num: int = Field(default=0, ge=0, le=20)
    return_text_in_logprobs: bool = False
    log_metrics: bool = True

    @property
    def is_batch(self) -> bool:
        prompt = self.text if self.text is not None else self.input_ids
        return isinstance(prompt, list) and (self.text is not None or any(isinstance(p, list) for p in prompt))

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
    # with return_logprob: [logprob, token_id, text or null] per token, and lists of those per position
    output_token_logprobs: list[list[Any]] | None = None
    output_top_logprobs: list[list[list[Any]] | None] | None = None
    input_token_logprobs: list[list[Any]] | None = None
    input_top_logprobs: list[list[list[Any]] | None] | None = None
    # with cache_ttl / cache_pins: one entry per pin (tokens, ttl_s, pinned, reason); api/retention.py
    cache_pins: list[dict[str, Any]] | None = Field(default=None, exclude_if=lambda v: v is None)
    cache_diagnostics: CacheDiagnostics | None = Field(default=None, exclude_if=lambda v: v is None)


class GenerateResponse(BaseModel):
    text: str
    output_ids: list[int]
    meta_info: MetaInfo


class FlushCacheResponse(BaseModel):
    success: bool
    message: str


class PromptStatsResponse(BaseModel):
    """`/v1/prompt_stats`: one row per template (`radixgate._wire.TemplateStats`; text: drift excerpts only)."""

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
