"""`AsyncClient`: the asyncio twin of `Client`, method for method (tests compare their signatures).
Only the way it waits differs; all request building lives in `_base_client`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ._base_client import (
    DEFAULT_BASE_URL,
    FALLBACK_MODEL,
    ChatInput,
    CompletionInput,
    build_body,
    check_static,
    error_for,
    first_model_id,
    make_options,
    retry_delay,
    sampling_params,
    should_retry,
    user_source,
    validate,
)
from ._exceptions import APIConnectionError, APITimeoutError
from ._prompt import Prompt
from ._streaming import AsyncStream
from ._types import ChatCompletion, ChatCompletionChunk, Completion, CompletionChunk, PromptStats, ServerInfo, Usage

__all__ = ["AsyncClient"]


class AsyncClient:
    """The asyncio twin of `Client`: the same options and methods, awaited."""

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        send_metadata: bool = True,
        stream_usage: bool = True,
        retry_backoff: float = 0.5,
        max_retry_delay: float = 8.0,
        min_static_tokens: int | None = None,
        default_headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.options = make_options(
            base_url=base_url,
            api_key=api_key,
            model=model,
            timeout=timeout,
            max_retries=max_retries,
            send_metadata=send_metadata,
            stream_usage=stream_usage,
            retry_backoff=retry_backoff,
            max_retry_delay=max_retry_delay,
            min_static_tokens=min_static_tokens,
            default_headers=default_headers,
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._model = model
        self._checked_templates: set[str] = set()

    async def chat(
        self,
        prompt: ChatInput,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        metadata: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> ChatCompletion:
        """``POST /v1/chat/completions`` with a `Prompt` (rendered static-first) or plain messages."""
        source = user_source()
        content = await self._body(
            "chat",
            prompt,
            model,
            False,
            sampling_params(max_tokens, temperature, top_p, stop, seed),
            metadata,
            extra_body,
            source,
        )
        return validate(ChatCompletion, await self._send("POST", "/chat/completions", content, timeout))

    async def chat_stream(
        self,
        prompt: ChatInput,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        metadata: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> AsyncStream[ChatCompletionChunk]:
        """Like `chat`, streamed: ``async for`` over the returned `AsyncStream`."""
        source = user_source()
        content = await self._body(
            "chat",
            prompt,
            model,
            True,
            sampling_params(max_tokens, temperature, top_p, stop, seed),
            metadata,
            extra_body,
            source,
        )
        response = await self._send("POST", "/chat/completions", content, timeout, stream=True)
        return AsyncStream(response, ChatCompletionChunk)

    async def complete(
        self,
        prompt: CompletionInput,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        metadata: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Completion:
        """``POST /v1/completions`` with a `Prompt` (rendered as text) or a string."""
        source = user_source()
        content = await self._body(
            "completion",
            prompt,
            model,
            False,
            sampling_params(max_tokens, temperature, top_p, stop, seed),
            metadata,
            extra_body,
            source,
        )
        return validate(Completion, await self._send("POST", "/completions", content, timeout))

    async def complete_stream(
        self,
        prompt: CompletionInput,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        metadata: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> AsyncStream[CompletionChunk]:
        """Like `complete`, streamed."""
        source = user_source()
        content = await self._body(
            "completion",
            prompt,
            model,
            True,
            sampling_params(max_tokens, temperature, top_p, stop, seed),
            metadata,
            extra_body,
            source,
        )
        return AsyncStream(await self._send("POST", "/completions", content, timeout, stream=True), CompletionChunk)

    async def warm(self, prompt: Prompt, *, model: str | None = None, timeout: float | None = None) -> Usage | None:
        """Prefill `prompt`'s static and shared prefix once; see `Client.warm`."""
        if not prompt.prefix_messages():
            return None
        source = user_source()
        content = await self._body(
            "chat", prompt.prefix(), model, False, sampling_params(1, 0.0, None, None, None), None, None, source
        )
        return validate(ChatCompletion, await self._send("POST", "/chat/completions", content, timeout)).usage

    async def server_info(self, *, timeout: float | None = None) -> ServerInfo:
        """``GET /server_info``: cache_hit_rate, token_usage and the server's settings."""
        return validate(ServerInfo, await self._send("GET", self.options.root_url + "/server_info", None, timeout))

    async def prompt_stats(self, *, timeout: float | None = None) -> PromptStats:
        """``GET /v1/prompt_stats``: per-template hit statistics."""
        return validate(PromptStats, await self._send("GET", "/prompt_stats", None, timeout))

    async def flush_cache(self, *, timeout: float | None = None) -> None:
        """``POST /flush_cache``: drop every cached prefix."""
        await self._send("POST", self.options.root_url + "/flush_cache", None, timeout)

    async def health(self, *, timeout: float | None = None) -> bool:
        """True when ``GET /health`` answers 2xx; never raises and never retries."""
        try:
            response = await self._http.get(self.options.root_url + "/health", timeout=timeout or self.options.timeout)
            return response.is_success
        except httpx.HTTPError:
            return False

    async def close(self) -> None:
        """Close the connection pool (only if the client created it)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _model_name(self, model: str | None) -> str:
        if model is None and self._model is None:
            try:
                self._model = first_model_id((await self._send("GET", "/models", None, None)).json())
            except Exception:  # servers without /v1/models accept the placeholder name
                self._model = FALLBACK_MODEL
        return model or self._model or FALLBACK_MODEL

    async def _body(
        self,
        kind: str,
        prompt: Any,
        model: str | None,
        stream: bool,
        params: dict[str, Any],
        metadata: Mapping[str, str] | None,
        extra_body: Mapping[str, Any] | None,
        source: str,
    ) -> bytes:
        check_static(self.options, self._checked_templates, prompt)
        return build_body(
            self.options,
            kind=kind,
            prompt=prompt,
            model=await self._model_name(model),
            stream=stream,
            params=params,
            metadata=metadata,
            extra_body=extra_body,
            source=source,
        )

    async def _send(
        self, method: str, path: str, content: bytes | None, timeout: float | None, *, stream: bool = False
    ) -> httpx.Response:
        url = path if path.startswith("http") else self.options.base_url + path
        request = self._http.build_request(
            method, url, content=content, headers=self.options.headers(), timeout=timeout or self.options.timeout
        )
        for attempt in range(self.options.max_retries + 1):
            last = attempt == self.options.max_retries
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.TimeoutException as exc:
                if last:
                    raise APITimeoutError(request=request) from exc
                await self._sleep(attempt, None)
                continue
            except httpx.TransportError as exc:
                if last:
                    raise APIConnectionError(request=request) from exc
                await self._sleep(attempt, None)
                continue
            if response.is_success:
                return response
            await response.aread()
            await response.aclose()
            if last or not should_retry(response):
                raise error_for(response)
            await self._sleep(attempt, response.headers)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _sleep(self, attempt: int, headers: httpx.Headers | None) -> None:
        await asyncio.sleep(
            retry_delay(attempt, headers, backoff=self.options.retry_backoff, max_delay=self.options.max_retry_delay)
        )
