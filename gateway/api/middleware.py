"""ASGI middleware that runs before routing: the body-size limit (413) and API-key checks (401).

Both answer with OpenAI's error body. Auth runs before the body is parsed, so a client
without a key learns nothing about the request's validity.

A server without keys that `radixgate serve` bound to loopback also has `allowed_hosts`: a `Host`
outside them is a 403 (a web page whose name was rebound to 127.0.0.1 sends its own name), and so
is a state-changing request a browser could send cross-site without asking first: one with an
`Origin` that is not an allowed host, or a form or plain-text content type.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any
from urllib.parse import urlsplit

from ..tenancy.auth import (
    SALT_HEADER,
    TENANT_HEADER,
    WEIGHT_HEADER,
    WORKER_ROLE,
    Authenticator,
    Identity,
    Tenant,
    channel_weight,
)
from .errors import COUNTED_ENDPOINTS, APIError

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# No key needed: liveness, the dashboard's static shell (it holds no data; its fetches send the key),
# and the worker-key challenge (it answers an HMAC of the caller's nonce, never the key).
PUBLIC_PATHS = frozenset({"/health", "/dashboard", "/worker_proof"})
# With keys configured, only an admin key (or the worker channel) reaches these.
ADMIN_PATHS = ("/workers",)  # /dashboard/data scopes itself: a tenant key sees its own tenant
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DISCONNECT_WATCH = "disconnect_watch"  # its key in the request's scope["state"]
# The content types a browser sends cross-site without a CORS preflight.
SIMPLE_CONTENT_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data", "text/plain")


def host_name(value: str) -> str:
    """`Host` or an origin's host without the port, lowercased: `[::1]:8000` -> `::1`."""
    host = urlsplit(value if "//" in value else "//" + value).hostname
    return (host or "").lower()


def browser_guard(method: str, headers: dict[str, str], allowed_hosts: Collection[str]) -> APIError | None:
    """The refusal for a rebound `Host` or a cross-site state change, or None."""
    hint = "this server has no API keys, so it answers only requests addressed to"
    if host_name(headers.get("host", "")) not in allowed_hosts:
        return APIError(
            403, f"{hint} {', '.join(allowed_hosts)}; configure API keys to serve other names", code="host_not_allowed"
        )
    if method not in STATE_CHANGING:
        return None
    origin = headers.get("origin")
    if origin is not None and host_name(origin) not in allowed_hosts:
        return APIError(403, f"{hint} its own pages: cross-origin requests from {origin} are refused", code="csrf")
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in SIMPLE_CONTENT_TYPES:
        return APIError(
            415, f"send 'Content-Type: application/json', not '{content_type}'", code="unsupported_media_type"
        )
    return None


async def _send_error(send: Send, error: APIError, scope: Scope | None = None) -> None:
    app = (scope or {}).get("app")
    gateway = getattr(getattr(app, "state", None), "gateway", None)
    endpoint = COUNTED_ENDPOINTS.get((scope or {}).get("path", ""))
    if gateway is not None and endpoint is not None:  # refused before routing: counted here
        outcome = {401: "unauthorized", 403: "forbidden", 413: "too_large"}.get(error.status, "rejected")
        gateway.metrics.observe_failed(endpoint, outcome, error.status)
    response = error.response()
    await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


class AuthMiddleware:
    """Sets `scope["state"]["tenant"]` and `["role"]` from the bearer key, or answers 401 (no or a
    wrong key) or 403 (a tenant key on the control plane, or a salt header off the worker channel)."""

    def __init__(
        self,
        app: ASGIApp,
        auth: Authenticator,
        public_metrics: bool = False,
        allowed_hosts: Collection[str] = (),
    ) -> None:
        self.app = app
        self.auth = auth
        self.public_metrics = public_metrics
        self.allowed_hosts = tuple(h.lower() for h in allowed_hosts)

    def _is_admin_path(self, path: str) -> bool:
        if path == "/metrics":
            return not self.public_metrics
        return any(path == p or path.startswith(p + "/") for p in ADMIN_PATHS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        is_public = path in PUBLIC_PATHS or (path == "/metrics" and self.public_metrics)
        try:
            if self.allowed_hosts and not self.auth.enabled:
                refusal = browser_guard(scope["method"], headers, self.allowed_hosts)
                if refusal is not None:
                    raise refusal
            identity = Identity("default", "admin")
            if self.auth.enabled and not is_public:
                # Anthropic's clients send the key as `x-api-key`
                key = headers.get("x-api-key")
                identity = self.auth.identify(headers.get("authorization") or (key and f"Bearer {key}"))
            if self.auth.enabled and not is_public and self._is_admin_path(path) and not identity.is_admin:
                raise APIError(403, f"{path} needs an admin API key", code="permission_denied")
            tenant: str = identity.tenant
            if identity.role == WORKER_ROLE:
                name, weight = headers.get(TENANT_HEADER) or identity.tenant, channel_weight(headers.get(WEIGHT_HEADER))
                tenant = Tenant(name, headers.get(SALT_HEADER), weight)
            elif SALT_HEADER in headers or WEIGHT_HEADER in headers:
                what, header = ("a cache salt", SALT_HEADER) if SALT_HEADER in headers else ("a weight", WEIGHT_HEADER)
                raise APIError(
                    403,
                    f"{what} is set by the gateway from your API key, never by a client; drop the '{header}' header",
                    code="permission_denied",
                )
        except APIError as error:
            return await _send_error(send, error, scope)
        state = scope.setdefault("state", {})
        state["tenant"], state["role"] = tenant, identity.role
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Reads request bodies up to `max_bytes` and replays them; larger ones get 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> APIError:
        return APIError(
            413, f"request body larger than {self.max_bytes} bytes; send a shorter prompt", code="request_too_large"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await _send_error(send, self._too_large(), scope)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending the whole body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await _send_error(send, self._too_large(), scope)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        is_replayed = False
        watch = DisconnectWatch(receive)
        scope.setdefault("state", {})[DISCONNECT_WATCH] = watch

        async def replay() -> Message:
            nonlocal is_replayed
            if not is_replayed:
                is_replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await watch.receive()  # later calls see http.disconnect, so aborts still work

        try:
            await self.app(scope, replay, send)
        finally:
            watch.close()


class DisconnectWatch:
    """Whether the client has left, learned by one task awaiting the server's `receive` once the body
    is read. Starlette's `Request.is_disconnected` instead polls `receive` inside a cancelled anyio
    scope on every check; here a check reads the task, and every later `receive()` caller (a
    streaming response's own listener included) is handed the message that task got."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._task: asyncio.Future[Message] | None = None

    def _watching(self) -> asyncio.Future[Message]:
        if self._task is None:
            self._task = asyncio.ensure_future(self._receive())
        return self._task

    async def receive(self) -> Message:
        message = await asyncio.shield(self._watching())  # a cancelled caller leaves the watch running
        if message.get("type") != "http.disconnect":
            self._task = None  # consumed: the next call waits for the next message
        return message

    async def is_disconnected(self) -> bool:
        if self._task is None:
            self._watching()
            await asyncio.sleep(0)  # a client already gone is seen by this first check, as Starlette's is
        task = self._watching()
        if not task.done() or task.cancelled():
            return False
        return task.exception() is not None or task.result().get("type") == "http.disconnect"

    async def wait_disconnected(self) -> None:
        """Returns once the client has left; what else the server hands over meanwhile is passed by."""
        while True:
            message = await self.receive()
            if message.get("type") == "http.disconnect":
                return

    def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


def disconnect_check(request: Any) -> Callable[[], Awaitable[bool]]:
    """The request's disconnect check: its `DisconnectWatch` when the body went through
    `BodyLimitMiddleware`, else Starlette's own."""
    watch = request.scope.get("state", {}).get(DISCONNECT_WATCH)
    return watch.is_disconnected if watch is not None else request.is_disconnected
