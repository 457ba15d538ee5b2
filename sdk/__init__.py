"""radixgate: prompt-aware LLM serving. The SDK lives here; the engine, gateway and linter are subpackages.

    import radixgate as rg

    SUPPORT = rg.Prompt(rg.system(INSTRUCTIONS), rg.tools(TOOLS), template="support-bot")
    with rg.Client() as client:                       # http://127.0.0.1:30000/v1
        reply = client.chat(SUPPORT.extend(rg.context(f"User id: {uid}"), rg.user(question)))
        print(reply.text, reply.usage.cached_tokens, reply.hit_ratio)

The public names load on first use (PEP 562): `import radixgate.linter` or `radixgate._wire`
loads neither httpx nor pydantic, and nothing here ever loads torch, the engine or the gateway.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the private module that defines it
_LAZY: dict[str, str] = {
    "AsyncClient": "_async_client",
    "Client": "_client",
    **dict.fromkeys(
        (
            "APIConnectionError",
            "APIError",
            "APIResponseValidationError",
            "APIStatusError",
            "APITimeoutError",
            "AuthenticationError",
            "BadRequestError",
            "ConflictError",
            "InternalServerError",
            "NotFoundError",
            "PermissionDeniedError",
            "RadixgateError",
            "RadixgateWarning",
            "RateLimitError",
            "ShortStaticPrefixWarning",
            "UnprocessableEntityError",
            "VolatileStaticSegmentWarning",
        ),
        "_exceptions",
    ),
    "Prompt": "_prompt",
    **dict.fromkeys(
        (
            "Segment",
            "Volatility",
            "canonical_json",
            "canonical_text",
            "context",
            "document",
            "examples",
            "history",
            "system",
            "tools",
            "user",
        ),
        "_segments",
    ),
    "AsyncStream": "_streaming",
    "Stream": "_streaming",
    "tagging_async_http_client": "_tagging",
    "tagging_http_client": "_tagging",
    "OPENAI_MIN_CACHE_TOKENS": "_wire",
    "openai_cache_hints": "_providers",
    "anthropic_min_cache_tokens": "_providers",
    "count_tokens": "_wire",
    **dict.fromkeys(
        (
            "ChatCompletion",
            "ChatCompletionChunk",
            "Completion",
            "CompletionChunk",
            "PromptStats",
            "ServerInfo",
            "TemplateStats",
            "Usage",
        ),
        "_types",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'radixgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:
    from ._async_client import AsyncClient
    from ._client import Client
    from ._exceptions import (
        APIConnectionError,
        APIError,
        APIResponseValidationError,
        APIStatusError,
        APITimeoutError,
        AuthenticationError,
        BadRequestError,
        ConflictError,
        InternalServerError,
        NotFoundError,
        PermissionDeniedError,
        RadixgateError,
        RadixgateWarning,
        RateLimitError,
        ShortStaticPrefixWarning,
        UnprocessableEntityError,
        VolatileStaticSegmentWarning,
    )
    from ._prompt import Prompt
    from ._providers import anthropic_min_cache_tokens, openai_cache_hints
    from ._segments import (
        Segment,
        Volatility,
        canonical_json,
        canonical_text,
        context,
        document,
        examples,
        history,
        system,
        tools,
        user,
    )
    from ._streaming import AsyncStream, Stream
    from ._tagging import tagging_async_http_client, tagging_http_client
    from ._types import (
        ChatCompletion,
        ChatCompletionChunk,
        Completion,
        CompletionChunk,
        PromptStats,
        ServerInfo,
        TemplateStats,
        Usage,
    )
    from ._wire import OPENAI_MIN_CACHE_TOKENS, count_tokens

__all__ = [
    "__version__",
    # clients
    "Client",
    "AsyncClient",
    "Stream",
    "AsyncStream",
    # prompts
    "Prompt",
    "Segment",
    "Volatility",
    "system",
    "tools",
    "examples",
    "document",
    "history",
    "context",
    "user",
    "canonical_text",
    "canonical_json",
    # tagging for apps that keep the openai client
    "tagging_http_client",
    "tagging_async_http_client",
    # tokens
    "count_tokens",
    "OPENAI_MIN_CACHE_TOKENS",
    # hosted providers' cache controls (Prompt.to_anthropic() builds Anthropic requests)
    "openai_cache_hints",
    "anthropic_min_cache_tokens",
    # responses
    "ChatCompletion",
    "ChatCompletionChunk",
    "Completion",
    "CompletionChunk",
    "Usage",
    "ServerInfo",
    "PromptStats",
    "TemplateStats",
    # errors and warnings
    "RadixgateError",
    "APIError",
    "APIConnectionError",
    "APITimeoutError",
    "APIResponseValidationError",
    "APIStatusError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "UnprocessableEntityError",
    "RateLimitError",
    "InternalServerError",
    "RadixgateWarning",
    "VolatileStaticSegmentWarning",
    "ShortStaticPrefixWarning",
]
