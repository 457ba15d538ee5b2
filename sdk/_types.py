"""Typed responses. Fields follow the OpenAI schema; unknown fields are kept, so servers that add
their own (SGLang, vLLM, radixgate) lose nothing. Every response exposes `cached_tokens` and
`hit_ratio`, the fraction of its prompt served from the prefix cache."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ._wire import TemplateStats

__all__ = [
    "Usage",
    "PromptTokensDetails",
    "ChatMessage",
    "ChatChoice",
    "ChatCompletion",
    "ChatDelta",
    "ChatChunkChoice",
    "ChatCompletionChunk",
    "CompletionChoice",
    "Completion",
    "CompletionChunk",
    "ServerInfo",
    "TemplateStats",
    "PromptStats",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", protected_namespaces=())


class PromptTokensDetails(_Model):
    cached_tokens: int = 0


class Usage(_Model):
    """Token counts of one request. `cached_tokens` is 0 when the server does not report it."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache."""
        return self.prompt_tokens_details.cached_tokens if self.prompt_tokens_details else 0

    @property
    def hit_ratio(self) -> float:
        """cached_tokens / prompt_tokens (0.0 for an empty prompt)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class _WithUsage(_Model):
    usage: Usage | None = None

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache (0 when the response carries no usage)."""
        return self.usage.cached_tokens if self.usage else 0

    @property
    def hit_ratio(self) -> float:
        """Fraction of this request's prompt served from the prefix cache."""
        return self.usage.hit_ratio if self.usage else 0.0


class ChatMessage(_Model):
    role: str = "assistant"
    content: str | None = None


class ChatChoice(_Model):
    index: int = 0
    message: ChatMessage
    finish_reason: str | None = None


class ChatCompletion(_WithUsage):
    """Response of ``POST /v1/chat/completions``."""

    id: str = ""
    object: str = "chat.completion"
    created: int = 0
    model: str = ""
    choices: list[ChatChoice]

    @property
    def text(self) -> str:
        """Content of the first choice."""
        return (self.choices[0].message.content or "") if self.choices else ""


class ChatDelta(_Model):
    role: str | None = None
    content: str | None = None


class ChatChunkChoice(_Model):
    index: int = 0
    delta: ChatDelta = ChatDelta()
    finish_reason: str | None = None


class ChatCompletionChunk(_WithUsage):
    """One server-sent event of a streamed chat completion; the last one carries `usage`."""

    id: str = ""
    object: str = "chat.completion.chunk"
    created: int = 0
    model: str = ""
    choices: list[ChatChunkChoice] = []

    @property
    def text(self) -> str:
        """Content added by this chunk."""
        return (self.choices[0].delta.content or "") if self.choices else ""


class CompletionChoice(_Model):
    index: int = 0
    text: str = ""
    finish_reason: str | None = None


class Completion(_WithUsage):
    """Response of ``POST /v1/completions``."""

    id: str = ""
    object: str = "text_completion"
    created: int = 0
    model: str = ""
    choices: list[CompletionChoice]

    @property
    def text(self) -> str:
        """Text of the first choice."""
        return self.choices[0].text if self.choices else ""


class CompletionChunk(_WithUsage):
    """One server-sent event of a streamed completion; the last one carries `usage`."""

    id: str = ""
    object: str = "text_completion"
    created: int = 0
    model: str = ""
    choices: list[CompletionChoice] = []

    @property
    def text(self) -> str:
        """Text added by this chunk."""
        return self.choices[0].text if self.choices else ""


class ServerInfo(_Model):
    """``GET /server_info``. Also indexable, as SGLang users write it: ``info["cache_hit_rate"]``."""

    cache_hit_rate: float = 0.0
    token_usage: float = 0.0

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None


class PromptStats(_Model):
    """``GET /v1/prompt_stats``: one `TemplateStats` row per template, most wasteful first."""

    templates: list[TemplateStats] = []

    def get(self, template: str) -> TemplateStats | None:
        """The statistics of `template`, or None if the server has seen no request of it."""
        return next((t for t in self.templates if t.template == template), None)
