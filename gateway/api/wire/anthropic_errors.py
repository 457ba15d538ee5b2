"""Errors on `/v1/messages` in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`.

Every error the gateway raises (`APIError`, validation, auth and size middleware) is written once
in OpenAI's shape by errors.py; on Anthropic's routes `AnthropicErrorShape` rewrites that body on
its way out, keeping the status, so the `anthropic` client raises the matching exception
(`BadRequestError`, `AuthenticationError`, `NotFoundError`, `RateLimitError`, ...).
"""

from __future__ import annotations

import json
from typing import Any

from ..middleware import ASGIApp, Message, Receive, Scope, Send

ANTHROPIC_PATH = "/v1/messages"
TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return TYPE_BY_STATUS.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def rewrite(status: int, body: bytes) -> bytes:
    """An OpenAI error body as Anthropic writes it; any other body as it is."""
    try:
        payload = json.loads(body)
    except ValueError:
        return body
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict) or payload.get("type") == "error":
        return body
    return json.dumps(anthropic_body(status, str(error.get("message") or "request failed"))).encode()


class AnthropicErrorShape:
    """ASGI middleware: JSON error responses under `/v1/messages` in Anthropic's shape."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")):
            return await self.app(scope, receive, send)
        start: Message | None = None
        chunks: list[bytes] = []

        async def shaped_send(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                is_json = headers.get(b"content-type", b"").startswith(b"application/json")
                if message["status"] >= 400 and is_json:
                    start = message  # held until the whole body is here
                    return
                return await send(message)
            if start is None or message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = rewrite(start["status"], b"".join(chunks))
            kept = [(k, v) for k, v in start.get("headers") or [] if k != b"content-length"]
            await send({**start, "headers": [*kept, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, shaped_send)
