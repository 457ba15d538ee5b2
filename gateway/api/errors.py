"""Errors as OpenAI writes them. This is the one place engine errors become HTTP statuses.

Every error response, including FastAPI's validation errors and unknown routes, carries
`{"error": {"message", "type", "param", "code"}}`, which the `openai` client parses.

A server-side error (5xx) never names an internal address: a worker's URL or `host:port` in its
message is replaced before it reaches the client, and the full message is logged instead.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("radixgate.gateway")

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_overloaded",
}


# scheme://anything, IPv4 with an optional port, [IPv6]:port, and name:port
_ADDRESS = re.compile(
    r"[a-zA-Z][\w+.-]*://[^\s'\"),;]+"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b"
    r"|\[[0-9a-fA-F:.]+\](?::\d{1,5})?"
    r"|\b[a-zA-Z][\w-]*(?:\.[\w-]+)*:\d{2,5}\b"
)
HIDDEN_ADDRESS = "<internal address>"
# user:password@ in a URL, and the value of a field whose name says it is a secret
_URL_PASSWORD = re.compile(r"([a-zA-Z][\w+.-]*://[^:/@\s]*:)[^@\s/]+@")
_SECRET_FIELD = re.compile(
    r"(?i)((?:password|passwd|secret|token|api[_-]?key|credentials?)[\"']?\s*[:=]\s*[\"']?)[^\"'\s,}&]+"
)
MASK = "***"


def hide_addresses(message: str) -> str:
    return _ADDRESS.sub(HIDDEN_ADDRESS, message)


def redact(value: Any) -> Any:
    """`value` with every URL password and secret-named field masked (strings, lists and dicts)."""
    if isinstance(value, str):
        return _SECRET_FIELD.sub(r"\1" + MASK, _URL_PASSWORD.sub(r"\1" + MASK + "@", value))
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


class APIError(Exception):
    """An error that reaches the client: HTTP status plus OpenAI's error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if status >= 500 and (hidden := hide_addresses(message)) != message:
            logger.warning("error %d sent to the client without addresses: %s", status, message)
            message = hidden
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type or _TYPE_BY_STATUS.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.headers = headers or {}
        self.is_counted = False  # already in the failed-requests metric (the generation path counts its own)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def no_worker_available(message: str, *, retry_after: bool = True) -> APIError:
    """The 503 a pool answers when none of its workers could take a request (`Retry-After: 1` unless
    told otherwise)."""
    headers = {"Retry-After": "1"} if retry_after else None
    return APIError(503, message, code="no_worker_available", type="server_error", headers=headers)


def from_engine_error(exc: ValueError) -> APIError:
    """The engine rejects bad input with ValueError before allocating anything: that is a 400."""
    message = str(exc) or "the engine rejected the request"
    code = "context_length_exceeded" if "context" in message.lower() else "invalid_value"
    named = re.match(r"([a-z_]+)=", message)  # "priority=3 needs ...": the field it names
    return APIError(400, message, code=code, param=named.group(1) if named else None)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None, str]:
    errors = exc.errors()
    if not errors:
        return "invalid request body", None, "invalid_request"
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return f"the request body is not valid JSON: {first.get('msg', '')}", None, "invalid_json"
    where = f" at '{param}'" if param else ""
    extra = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{first.get('msg', 'invalid value')}{where}{extra}", param, "invalid_request"


# Generation endpoints whose refusals the metrics count, by their metrics label.
COUNTED_ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/generate": "generate",
    "/v1/messages": "messages",
    "/v1/responses": "responses",
    "/v1/embeddings": "embeddings",
}
_OUTCOME_BY_STATUS = {400: "invalid", 404: "not_found", 413: "too_large", 429: "rate_limited", 503: "unavailable"}


def count_rejection(request: Request, status: int, code: str | None) -> None:
    """Counts a generation request answered with an error before it produced anything."""
    endpoint = COUNTED_ENDPOINTS.get(request.url.path)
    gateway = getattr(request.app.state, "gateway", None)
    if endpoint is None or gateway is None:
        return
    outcome = _OUTCOME_BY_STATUS.get(status, "rejected" if status < 500 else "error")
    if code == "unsupported_parameter":
        outcome = "unsupported"
    gateway.metrics.observe_failed(endpoint, outcome, status)


def install_error_handlers(app: FastAPI) -> None:
    """Route every failure through OpenAI's error body; 422 becomes 400 as OpenAI clients expect."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        if not exc.is_counted:
            count_rejection(request, exc.status, exc.code)
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param, code = _validation_message(exc)
        count_rejection(request, 400, code)
        return APIError(400, message, param=param, code=code).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404:
            message = "unknown endpoint; see /docs for the routes this server offers"
        return APIError(exc.status_code, message, headers=dict(exc.headers or {})).response()

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error in the gateway")
        return APIError(500, f"internal error: {type(exc).__name__}", type="server_error").response()
