"""Tag an existing OpenAI-client app's requests with their call site, without rewriting its prompts.

    from openai import OpenAI
    import radixgate
    client = OpenAI(base_url=..., http_client=radixgate.tagging_http_client())

Every JSON request the client sends gains the `metadata` keys `prompt_template` (the
calling function's name) and `prompt_source` (`path:line` of the application line that made the
call), unless the request already carries them, so radixgate's gateway can attribute hit rates to
that line and promptlint can rank its findings by them. The body is otherwise sent byte for byte.
On Anthropic's Messages API, whose `metadata` takes only `user_id`, the tags go in headers
(`x-radixgate-prompt-template`, `x-radixgate-prompt-source`) and the body is left as it is.
"""

from __future__ import annotations

import json
import os
import sysconfig

import httpx

from ._callsite import _display_path, _user_frame
from ._wire import METADATA_HEADERS, PROMPT_SOURCE, PROMPT_TEMPLATE

_MESSAGES_PATHS = ("/v1/messages", "/v1/messages/count_tokens")

_SKIPPED_DIRS = tuple(
    {
        os.path.abspath(p) + os.sep
        for p in (
            os.path.dirname(os.path.abspath(__file__)),
            sysconfig.get_paths()["stdlib"],
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"],
        )
    }
)


def application_frame():
    """The innermost frame outside the SDK, the standard library and installed packages."""
    return _user_frame(_SKIPPED_DIRS)


def _tag(request: httpx.Request) -> httpx.Request:
    if request.method != "POST" or "json" not in request.headers.get("content-type", ""):
        return request
    try:
        body = json.loads(request.content)
    except ValueError:
        return request
    frame = application_frame()
    if not isinstance(body, dict) or frame is None:
        return request
    name = frame.f_code.co_name
    if name == "<module>":
        name = os.path.splitext(os.path.basename(frame.f_code.co_filename))[0]
    source = f"{_display_path(frame.f_code.co_filename)}:{frame.f_lineno}"
    if request.url.path.endswith(_MESSAGES_PATHS):
        if METADATA_HEADERS[PROMPT_SOURCE] not in request.headers:
            request.headers.setdefault(METADATA_HEADERS[PROMPT_TEMPLATE], name)
            request.headers[METADATA_HEADERS[PROMPT_SOURCE]] = source
        return request
    metadata = dict(body.get("metadata") or {})
    if PROMPT_SOURCE in metadata:
        return request
    metadata.setdefault(PROMPT_TEMPLATE, name)
    metadata[PROMPT_SOURCE] = source
    body["metadata"] = metadata
    headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
    return httpx.Request(
        request.method, request.url, headers=headers, content=json.dumps(body).encode(), extensions=request.extensions
    )


class TaggingTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport | None = None):
        self._inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._inner.handle_request(_tag(request))

    def close(self) -> None:
        self._inner.close()


class AsyncTaggingTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport | None = None):
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(_tag(request))

    async def aclose(self) -> None:
        await self._inner.aclose()


def tagging_http_client(*, timeout: float = 600.0) -> httpx.Client:
    """An httpx client for `openai.OpenAI(http_client=...)` that tags requests with their call site."""
    return httpx.Client(transport=TaggingTransport(), timeout=timeout)


def tagging_async_http_client(*, timeout: float = 600.0) -> httpx.AsyncClient:
    """The async twin of `tagging_http_client`, for `openai.AsyncOpenAI(http_client=...)`."""
    return httpx.AsyncClient(transport=AsyncTaggingTransport(), timeout=timeout)
