"""Wire helpers the routes share: server-sent events as OpenAI sends them, and the error schema for OpenAPI."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from .openai_schemas import ErrorResponse

ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 503)}
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = "[DONE]"


def sse(payload: dict[str, Any] | str) -> str:
    """One event: `data: {json}` and a blank line; the stream ends with `data: [DONE]`."""
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload, separators=(',', ':'))}\n\n"


def sse_response(events: AsyncIterator[str]) -> StreamingResponse:
    """Starlette cancels `events` when the client disconnects, which aborts the engine requests."""
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
