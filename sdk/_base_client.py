"""What `Client` and `AsyncClient` share: options, request bodies, metadata, retry policy.

Everything here is synchronous and does no I/O, so the two clients differ only in how they send.
A request body is serialized to bytes once, before the first attempt; retries resend those bytes,
so nothing in the prompt (a timestamp, a random example order) is re-rendered inside a retry.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from . import __version__
from ._callsite import call_site
from ._exceptions import APIResponseValidationError, status_error
from ._prompt import Prompt
from ._segments import Message
from ._wire import RequestTags

__all__ = ["DEFAULT_BASE_URL", "ChatInput", "CompletionInput", "ClientOptions", "RETRY_STATUSES"]

DEFAULT_BASE_URL = "http://127.0.0.1:30000/v1"
RETRY_STATUSES = frozenset({408, 409, 429})

ChatInput = Prompt | Sequence[Message]
CompletionInput = Prompt | str


@dataclass(frozen=True)
class ClientOptions:
    """The settings both clients are built from (see `Client` for their meaning)."""

    base_url: str
    api_key: str | None
    model: str | None
    timeout: float
    max_retries: int
    send_metadata: bool
    stream_usage: bool
    retry_backoff: float
    max_retry_delay: float
    min_static_tokens: int | None
    default_headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout}")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    @property
    def root_url(self) -> str:
        """The server root, where SGLang-style endpoints (/server_info, /flush_cache) live."""
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "user-agent": f"radixgate-sdk/{__version__}"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        headers.update(self.default_headers)
        return headers


def _plain_messages_metadata(messages: Sequence[Message], source: str) -> dict[str, str]:
    """Plain messages have no declared static part; their leading system messages stand in for it."""
    static = "\n\n".join(m["content"] for m in _leading_system(messages) if isinstance(m.get("content"), str))
    return RequestTags.for_static_text(source, source, static).to_metadata()


def _leading_system(messages: Sequence[Message]) -> list[Message]:
    out = []
    for m in messages:
        if m.get("role") not in ("system", "developer"):
            break
        out.append(m)
    return out


def request_metadata(prompt: ChatInput | str, source: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    """The request metadata (`radixgate._wire.RequestTags`), with the caller's `extra` entries on top."""
    if isinstance(prompt, Prompt):
        metadata = prompt.metadata(source=source)
    elif isinstance(prompt, str):
        metadata = RequestTags(source, source).to_metadata()
    else:
        metadata = _plain_messages_metadata(prompt, source)
    if extra:
        metadata.update({str(k): str(v) for k, v in extra.items()})
    return metadata


def build_body(
    options: ClientOptions,
    *,
    kind: str,
    prompt: ChatInput | CompletionInput,
    model: str,
    stream: bool,
    params: Mapping[str, Any],
    metadata: Mapping[str, str] | None,
    extra_body: Mapping[str, Any] | None,
    source: str,
) -> bytes:
    """The JSON bytes of a chat (``kind="chat"``) or completion request."""
    body: dict[str, Any] = {"model": model}
    if kind == "chat":
        if isinstance(prompt, str):
            raise TypeError("a chat request takes a Prompt or a list of messages, not a string")
        body["messages"] = prompt.messages() if isinstance(prompt, Prompt) else [dict(m) for m in prompt]
    else:
        body["prompt"] = prompt.text() if isinstance(prompt, Prompt) else prompt
    body.update({k: v for k, v in params.items() if v is not None})
    if stream:
        body["stream"] = True
        if options.stream_usage:
            body["stream_options"] = {"include_usage": True}
    if options.send_metadata:
        body["metadata"] = request_metadata(prompt, source, metadata)
    if isinstance(prompt, Prompt):  # OpenAI's cache-routing key, also the router's hint in radixgate's gateway
        body["prompt_cache_key"] = prompt.prompt_cache_key
    if extra_body:
        body.update(extra_body)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def user_source() -> str:
    """``path:line`` of the application line that called the client."""
    return call_site()


def should_retry(response: httpx.Response) -> bool:
    """Whether a failed response is worth another attempt."""
    if response.headers.get("x-should-retry") in ("true", "false"):
        return response.headers["x-should-retry"] == "true"
    return response.status_code in RETRY_STATUSES or response.status_code >= 500


def retry_delay(attempt: int, headers: Mapping[str, str] | None, *, backoff: float, max_delay: float) -> float:
    """Seconds to wait before retry number `attempt` (0-based).

    A server's ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date) wins when it is between
    0 and 60 s; otherwise exponential backoff from `backoff`, capped at `max_delay`, minus up to
    25 % jitter so that many clients do not retry in lockstep.
    """
    headers = headers or {}
    server_delay: float | None = None
    if "retry-after-ms" in headers:
        try:
            server_delay = float(headers["retry-after-ms"]) / 1000
        except ValueError:
            server_delay = None
    elif "retry-after" in headers:
        value = headers["retry-after"]
        try:
            server_delay = float(value)
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(value) if value else None
            server_delay = parsed.timestamp() - time.time() if parsed else None
    if server_delay is not None and 0 <= server_delay <= 60:
        return server_delay
    delay = min(max_delay, backoff * 2**attempt)
    return delay * (1 - 0.25 * random.random())


def parse_json(response: httpx.Response) -> Any:
    """The response body as JSON; a non-JSON 2xx body is an `APIResponseValidationError`."""
    try:
        return response.json()
    except ValueError as exc:
        raise APIResponseValidationError(response=response, body=response.text) from exc


def error_for(response: httpx.Response) -> Exception:
    """The exception for a 4xx/5xx response whose body has been read."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return status_error(response, body)


def validate(cast: Any, response: httpx.Response) -> Any:
    """`cast` built from the JSON body of `response`."""
    data = parse_json(response)
    try:
        return cast.model_validate(data)
    except ValueError as exc:
        raise APIResponseValidationError(response=response, body=data) from exc


# Servers without /v1/models (or that ignore the name, like SGLang) accept this placeholder.
FALLBACK_MODEL = "default"


def make_options(**kwargs: Any) -> ClientOptions:
    """`ClientOptions` from a client's keyword arguments."""
    headers = kwargs.pop("default_headers") or {}
    return ClientOptions(default_headers=dict(headers), **kwargs)


def sampling_params(
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    stop: str | Sequence[str] | None,
    seed: int | None,
) -> dict[str, Any]:
    return {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "stop": stop, "seed": seed}


def first_model_id(data: Any) -> str:
    """The first model id of a ``GET /v1/models`` body."""
    models = data.get("data") if isinstance(data, dict) else None
    return str(models[0]["id"]) if models else FALLBACK_MODEL


def check_static(options: ClientOptions, checked: set[str], prompt: Any) -> None:
    """Warn once per template when a `Prompt`'s static prefix is below `min_static_tokens`."""
    minimum = options.min_static_tokens
    if minimum and isinstance(prompt, Prompt) and prompt.template not in checked:
        checked.add(prompt.template)
        prompt.check_cacheable(minimum)
