"""ASGI middleware that runs before routing: the body-size limit (413) and API-key checks (401).

Both answer with OpenAI's error body. Auth runs before the body is parsed, so a client
without a key learns nothing about the request's validity.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..tenancy.auth import SALT_HEADER, TENANT_HEADER, WORKER_ROLE, Authenticator, Identity, Tenant
from .errors import COUNTED_ENDPOINTS, APIError

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# No key needed: liveness, and the dashboard's static shell (it holds no data; its fetches send the key).
PUBLIC_PATHS = frozenset({"/health", "/dashboard"})
# With keys configured, only an admin key (or the worker channel) reaches these.
ADMIN_PATHS = ("/workers", "/dashboard/data")


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

    def __init__(self, app: ASGIApp, auth: Authenticator, public_metrics: bool = False) -> None:
        self.app = app
        self.auth = auth
        self.public_metrics = public_metrics

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
            identity = Identity("default", "admin")
            if self.auth.enabled and not is_public:
                identity = self.auth.identify(headers.get("authorization"))
            if self.auth.enabled and not is_public and self._is_admin_path(path) and not identity.is_admin:
                raise APIError(403, f"{path} needs an admin API key", code="permission_denied")
            tenant: str = identity.tenant
            if identity.role == WORKER_ROLE:
                tenant = Tenant(headers.get(TENANT_HEADER) or identity.tenant, headers.get(SALT_HEADER))
            elif SALT_HEADER in headers:
                raise APIError(
                    403,
                    "a cache salt is set by the gateway from your API key, never by a client; drop the "
                    f"'{SALT_HEADER}' header",
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

        async def replay() -> Message:
            nonlocal is_replayed
            if not is_replayed:
                is_replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # later calls see http.disconnect, so aborts still work

        await self.app(scope, replay, send)
