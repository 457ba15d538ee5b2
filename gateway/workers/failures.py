"""What a remote worker's failure says about the request, which decides whether the pool may send
it to another worker:
- `WorkerUnavailable`: nothing about it. The worker never took it (connection refused, connect
  timeout, 502/503/504 or 401/403/404/429 before admission, a worker draining): another may serve it.
- `WorkerError`: the worker took it and failed it (an error in its stream, a 500, a connection
  reset once sent): the same request could fail the next worker the same way, so it is never
  retried. `code` is the worker's error code ("engine_unavailable": its engine has stopped).
- `ValueError`: the worker rejected it (4xx): the client's error, never retried.

For a prefill/decode pair (`pd_router.py`), which side failed: `broke` (its connection was refused
or broke), `prefill_retryable` (another prefill worker may serve the request) and
`prefill_may_be_at_fault` (the decode side's transfer failed: await the prefill's own answer).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from ..api.errors import APIError

RETRYABLE_STATUSES = (401, 403, 404, 429, 502, 503, 504)
ENGINE_DOWN = "engine_unavailable"


class WorkerUnavailable(Exception):
    """The worker could not take the request (nothing was streamed): another worker may."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class WorkerError(RuntimeError):
    """The worker took the request and failed it: never retried elsewhere."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def is_down(exc: Exception) -> bool:
    """The failure says the worker cannot serve anything now: connection refused, engine stopped."""
    refused = isinstance(exc.__cause__, Exception) and "Connect" in type(exc.__cause__).__name__
    return refused or getattr(exc, "code", None) == ENGINE_DOWN


def failed_on(worker: str, exc: Exception) -> Exception:
    """What a request a worker took and failed ends with: a 500 when the worker failed this request
    alone (`request_failed`), else a RuntimeError (the gateway's 503: that engine cannot serve)."""
    if getattr(exc, "code", None) == "request_failed":
        return APIError(500, f"{worker}: {exc}", code="request_failed", type="server_error")
    return RuntimeError(f"{worker}: {exc}")


def error_of(body: Any) -> tuple[str, str | None]:
    """(message, code) of an OpenAI-style error body, or of anything else."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error)), error.get("code")
    return str(error if error is not None else body)[:500], None


def status_failure(where: str, status: int, text: str) -> Exception:
    """What a worker's answer with an error status (>= 400) and body `text` raises."""
    try:
        message, code = error_of(json.loads(text))
    except ValueError:
        message, code = text[:500], None
    if status in RETRYABLE_STATUSES:
        return WorkerUnavailable(f"{where} answered {status}: {message}", code)
    if status >= 500:
        return WorkerError(f"{where} answered {status}: {message}", code)
    return ValueError(message)


# ---- a prefill/decode pair (pd_router.py): which side failed, and may another prefill serve it ----
def broke(exc: BaseException | None) -> bool:
    """The worker's connection was refused or broke: the worker died, or is not there."""
    while exc is not None:
        if isinstance(exc, httpx.TransportError):
            return True
        exc = exc.__cause__
    return False


def prefill_retryable(prefill_exc: BaseException | None, decode_exc: BaseException | None) -> bool:
    """A prefill worker that died, or refused the request (a worker's 'not now', before taking it),
    while the decode worker lives: another prefill worker may serve the request."""
    if prefill_exc is None or broke(decode_exc):
        return False
    return isinstance(prefill_exc, WorkerUnavailable) or broke(prefill_exc)


def error_code(exc: BaseException | None) -> str | None:
    """The worker's error code a failure carries, through the exceptions it was re-raised as."""
    while exc is not None:
        if getattr(exc, "code", None) is not None:
            return exc.code  # type: ignore[attr-defined]
        exc = exc.__cause__
    return None


def prefill_may_be_at_fault(decode_exc: BaseException) -> bool:
    """The decode worker's transfer failed (`kv_transfer_failed`): the prefill worker may have died
    or failed it, and will say so. Any other failure came before the decode side reached the
    prefill, or is its own (refused, died, handshake, no room): the prefill would wait in vain."""
    return not broke(decode_exc) and error_code(decode_exc) == "kv_transfer_failed"
