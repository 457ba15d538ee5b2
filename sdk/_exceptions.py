"""Errors raised by `radixgate.Client` and `radixgate.AsyncClient`.

The tree follows openai-python, so code that catches ``openai.RateLimitError`` reads the same::

    RadixgateError
     ├── APIError                        the request reached (or tried to reach) a server
     │    ├── APIConnectionError         no response: refused, reset, DNS, TLS ...
     │    │    └── APITimeoutError       no response within the timeout
     │    ├── APIResponseValidationError a 2xx response whose body is not what the API promises
     │    └── APIStatusError             a 4xx / 5xx response; `.status_code`, `.response`, `.body`
     │         ├── BadRequestError            400
     │         ├── AuthenticationError        401
     │         ├── PermissionDeniedError      403
     │         ├── NotFoundError              404
     │         ├── ConflictError              409
     │         ├── UnprocessableEntityError   422
     │         ├── RateLimitError             429
     │         └── InternalServerError        >= 500
     └── (warnings, not errors)
          RadixgateWarning
           ├── VolatileStaticSegmentWarning   a static segment contains a timestamp, UUID or long number
           └── ShortStaticPrefixWarning       the static prefix is below a provider's minimum for caching

Connection errors, timeouts, 408, 409, 429 and 5xx are retried (see ``max_retries``) before they
are raised; every other status is raised at once.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = [
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


class RadixgateError(Exception):
    """Base class of every error the SDK raises."""


class APIError(RadixgateError):
    """A request to the server failed; `request` is the httpx request that was sent."""

    def __init__(self, message: str, *, request: httpx.Request, body: object | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request = request
        self.body = body


class APIConnectionError(APIError):
    """The server could not be reached, or the connection broke before a response arrived."""

    def __init__(self, *, request: httpx.Request, message: str | None = None) -> None:
        super().__init__(
            message
            or f"Could not connect to {request.url}. Check that the server is running and that "
            "base_url is right (radixgate serve listens on http://127.0.0.1:30000/v1 by default).",
            request=request,
        )


class APITimeoutError(APIConnectionError):
    """No response arrived within the client's timeout."""

    def __init__(self, *, request: httpx.Request) -> None:
        super().__init__(
            request=request,
            message=f"Request to {request.url} timed out. Raise `timeout=` on the client or the call, "
            "or lower max_tokens.",
        )


class APIResponseValidationError(APIError):
    """The server answered 2xx with a body that does not match the OpenAI schema."""

    def __init__(self, *, response: httpx.Response, body: object | None, message: str | None = None) -> None:
        super().__init__(
            message
            or f"{response.request.url} returned a body the SDK cannot read: {str(body)[:200]!r}. "
            "Is base_url an OpenAI-compatible endpoint (it usually ends in /v1)?",
            request=response.request,
            body=body,
        )
        self.response = response
        self.status_code = response.status_code


class APIStatusError(APIError):
    """The server answered with a 4xx or 5xx status."""

    def __init__(self, message: str, *, response: httpx.Response, body: object | None) -> None:
        super().__init__(message, request=response.request, body=body)
        self.response = response
        self.status_code = response.status_code


class BadRequestError(APIStatusError):
    """400: the server refused the request body. If it names `metadata`, create the client with
    ``send_metadata=False``."""


class AuthenticationError(APIStatusError):
    """401: missing or wrong API key."""


class PermissionDeniedError(APIStatusError):
    """403: the key is valid but may not use this resource."""


class NotFoundError(APIStatusError):
    """404: wrong path or model name."""


class ConflictError(APIStatusError):
    """409: the request conflicts with the server's state."""


class UnprocessableEntityError(APIStatusError):
    """422: the body parsed but failed validation."""


class RateLimitError(APIStatusError):
    """429: too many requests; retried with backoff honouring Retry-After before it is raised."""


class InternalServerError(APIStatusError):
    """5xx: the server failed; retried with backoff before it is raised."""


_STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def status_error(response: httpx.Response, body: Any) -> APIStatusError:
    """The `APIStatusError` subclass for `response`, with the server's message when it sent one."""
    detail: object = body
    if isinstance(body, dict):
        error = body.get("error", body)
        detail = error.get("message", error) if isinstance(error, dict) else error
    message = f"{response.request.method} {response.request.url.path} returned {response.status_code}: {detail}"
    cls = _STATUS_ERRORS.get(response.status_code)
    if cls is None:
        cls = InternalServerError if response.status_code >= 500 else APIStatusError
    return cls(message, response=response, body=body)


class RadixgateWarning(UserWarning):
    """Base class of the SDK's warnings about prompts that will not cache well."""


class VolatileStaticSegmentWarning(RadixgateWarning):
    """A segment declared static contains content that changes between requests."""


class ShortStaticPrefixWarning(RadixgateWarning):
    """The static prefix has fewer tokens than a provider requires before it caches anything."""
