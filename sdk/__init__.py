"""radixgate: prompt-aware LLM serving. The SDK lives here; the engine, gateway and linter are subpackages.

    import radixgate as rg

    SUPPORT = rg.Prompt(rg.system(INSTRUCTIONS), rg.tools(TOOLS), template="support-bot")
    with rg.Client() as client:                       # http://127.0.0.1:30000/v1
        reply = client.chat(SUPPORT.extend(rg.context(f"User id: {uid}"), rg.user(question)))
        print(reply.text, reply.usage.cached_tokens, reply.hit_ratio)

Importing this package loads httpx and pydantic only: never torch, the engine or the gateway.
"""

__version__ = "0.1.0"

from ._async_client import AsyncClient  # noqa: E402
from ._client import Client  # noqa: E402
from ._exceptions import (  # noqa: E402
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
from ._prompt import Prompt  # noqa: E402
from ._segments import (  # noqa: E402
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
from ._streaming import AsyncStream, Stream  # noqa: E402
from ._tagging import tagging_async_http_client, tagging_http_client  # noqa: E402
from ._tokens import OPENAI_MIN_CACHE_TOKENS, count_tokens  # noqa: E402
from ._types import (  # noqa: E402
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    CompletionChunk,
    PromptStats,
    ServerInfo,
    TemplateStats,
    Usage,
)

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
