"""Workers behind HTTP: another `radixgate serve`, or any OpenAI-compatible server (vLLM, SGLang).

Both take token ids (the front gateway tokenized), stream deltas, and raise:
- `WorkerUnavailable` when the worker cannot be reached or fails (5xx) before its first delta,
  so the pool may retry the request elsewhere;
- `RuntimeError` when it fails after streaming began (only that request fails);
- `ValueError` when it rejects the request (4xx): the client's error, not the worker's.

A radixgate worker gets the tenant's cache salt in a header on the worker channel (the shared
`--worker-api-key`); it refuses that header from anyone else. A `vllm+http://` worker gets it as
vLLM's `cache_salt` body field; a plain `openai+http://` worker has no salt, so the pool refuses
it tenant-salted requests unless `--allow-unsalted-workers`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..observe.telemetry import trace_headers
from ..tenancy.auth import SALT_HEADER
from .worker import WorkRequest

CONNECT_TIMEOUT_S = 2.0
PROBE_TIMEOUT_S = 2.0
SCHEMES = {"http": "radixgate", "https": "radixgate", "openai+http": "openai", "openai+https": "openai"}
SCHEMES |= {"vllm+http": "vllm", "vllm+https": "vllm"}


class WorkerUnavailable(Exception):
    """The worker could not take the request (nothing was streamed): another worker may."""


@dataclass
class RemoteOutput:
    rid: str
    token_ids: list[int]
    text: str
    prompt_tokens: int
    cached_tokens: int
    finish_reason: str
    times: dict[str, float] = field(default_factory=dict)


@dataclass
class RemoteDelta:
    token_ids: list[int]
    text: str
    finished: bool = False
    output: RemoteOutput | None = None


def parse_worker_url(url: str) -> tuple[str, str]:
    """`(kind, base_url)`: `http://h:p` is a radixgate worker; `openai+http://h:p` a foreign one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES or not rest:
        raise ValueError(
            f"worker URL '{url}': use http(s)://HOST:PORT for a radixgate worker, openai+http(s)://... for any "
            "OpenAI-compatible server, or vllm+http(s)://... for vLLM (tenant salts as cache_salt)"
        )
    return SCHEMES[scheme], f"{scheme.rsplit('+', 1)[-1]}://{rest.rstrip('/')}"


async def _sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        event = json.loads(data)
        if "error" in event:
            error = event["error"]
            raise RuntimeError(error.get("message", str(error)) if isinstance(error, dict) else str(error))
        yield event


class HTTPWorker:
    """What both HTTP workers share: the client, probing, starting a stream with retryable failures."""

    kind = "radixgate"

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.last_stats: dict[str, Any] = {}
        self._client: httpx.AsyncClient | None = None

    @property
    def supports_salt(self) -> bool:
        return self.kind == "vllm" or (self.kind == "radixgate" and self.api_key is not None)

    def _headers(self, cache_salt: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if cache_salt is not None and self.kind == "radixgate" and self.api_key:
            headers[SALT_HEADER] = cache_salt
        return headers

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:  # created on first use, in the event loop that serves requests
            timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)
            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=timeout)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _open(self, path: str, body: dict[str, Any], cache_salt: str | None) -> httpx.Response:
        """Send the request and check its status; raises before any token is streamed."""
        try:
            headers = trace_headers(self._headers(cache_salt))  # the request span is current: the worker joins it
            request = self.client.build_request("POST", path, json=body, headers=headers)
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise WorkerUnavailable(f"{self.base_url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            text = (await response.aread()).decode(errors="replace")
            await response.aclose()
            try:
                message = json.loads(text)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = text[:500]
            if response.status_code >= 500 or response.status_code in (401, 403, 404, 429):
                raise WorkerUnavailable(f"{self.base_url} answered {response.status_code}: {message}")
            raise ValueError(message)
        return response

    async def probe(self) -> dict[str, Any]:
        """Raises unless the worker is healthy; returns its stats when it reports them."""
        response = await self.client.get("/health", headers=self._headers(), timeout=PROBE_TIMEOUT_S)
        response.raise_for_status()
        return {}

    def _sync_post(self, path: str, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(self.base_url + path, headers=headers, timeout=30.0)


class RadixgateWorker(HTTPWorker):
    """Another `radixgate serve`, driven through SGLang's native `/generate` with token ids."""

    kind = "radixgate"

    async def probe(self) -> dict[str, Any]:
        response = await self.client.get("/server_info", headers=self._headers(), timeout=PROBE_TIMEOUT_S)
        response.raise_for_status()
        self.last_stats = response.json()
        if "workers" in self.last_stats:
            raise ValueError(f"{self.base_url} is itself a router; point --worker at engines")
        return self.last_stats

    async def stream(self, request: WorkRequest) -> AsyncIterator[RemoteDelta]:
        body = {
            "input_ids": request.input_ids,
            "rid": request.rid,
            "stream": True,
            "sampling_params": {
                "max_new_tokens": request.max_new_tokens,
                "temperature": request.temperature,
                "top_p": request.top_p,
                "top_k": request.top_k,
                "min_p": request.min_p,
                "seed": request.seed,
                "stop": list(request.stop) or None,
                "stop_token_ids": list(request.stop_token_ids) or None,
                "ignore_eos": request.ignore_eos,
            },
        }
        grammar = {"json_schema": request.json_schema, "regex": request.regex, "ebnf": request.ebnf}
        body["sampling_params"].update({k: v for k, v in grammar.items() if v is not None})
        if request.json_any_whitespace:
            body["sampling_params"]["json_any_whitespace"] = True
        response = await self._open("/generate", body, request.cache_salt)
        ids: list[int] = []
        text = ""
        try:
            async for event in _sse_events(response):
                new_ids, new_text = event["output_ids"][len(ids) :], event["text"][len(text) :]
                ids, text = list(event["output_ids"]), event["text"]
                meta = event["meta_info"]
                output = None
                if meta.get("finish_reason") is not None:
                    output = RemoteOutput(
                        request.rid,
                        ids,
                        text,
                        meta["prompt_tokens"],
                        meta["cached_tokens"],
                        meta["finish_reason"]["type"],
                    )
                yield RemoteDelta(new_ids, new_text, output is not None, output)
                if output is not None:
                    return
        except httpx.HTTPError as exc:
            raise RuntimeError(f"worker {self.base_url} failed mid-stream: {type(exc).__name__}: {exc}") from exc
        finally:
            await response.aclose()
        raise RuntimeError(f"worker {self.base_url} ended the stream without a result")

    def flush_cache(self, cache_salt: str | None = None) -> bool:
        return self._sync_post("/flush_cache", self._headers(cache_salt)).status_code == 200

    def check_idle_invariant(self) -> None:
        response = httpx.get(self.base_url + "/debug/check_idle_invariant", headers=self._headers(), timeout=30.0)
        if response.status_code == 409:
            raise AssertionError(f"{self.base_url}: {response.json()['error']['message']}")


class OpenAIWorker(HTTPWorker):
    """Any OpenAI-compatible server, through `/v1/completions` with a token-id prompt. It returns
    text, not token ids: `tokenize` turns the text back into (approximate) ids for the counts."""

    kind = "openai"

    def __init__(
        self, base_url: str, api_key: str | None, tokenize: Callable[[str], list[int]], kind: str = "openai"
    ) -> None:
        super().__init__(base_url, api_key)
        self.kind = kind
        self._tokenize = tokenize
        self.model: str | None = None

    async def probe(self) -> dict[str, Any]:
        await super().probe()
        if self.model is None:
            response = await self.client.get("/v1/models", headers=self._headers(), timeout=PROBE_TIMEOUT_S)
            response.raise_for_status()
            self.model = response.json()["data"][0]["id"]
        return {}

    async def stream(self, request: WorkRequest) -> AsyncIterator[RemoteDelta]:
        body: dict[str, Any] = {
            "model": self.model or "default",
            "prompt": request.input_ids,
            "max_tokens": request.max_new_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.seed is not None:
            body["seed"] = request.seed
        if request.stop:
            body["stop"] = list(request.stop)
        # Extensions vLLM and SGLang both accept; sent only when set, so strict servers are not bothered.
        extras = {"top_k": request.top_k, "min_p": request.min_p, "ignore_eos": request.ignore_eos}
        extras["stop_token_ids"] = list(request.stop_token_ids)
        body.update({k: v for k, v in extras.items() if v not in (-1, 0.0, False, [])})
        if self.kind == "vllm" and request.cache_salt is not None:
            body["cache_salt"] = request.cache_salt
        response = await self._open("/v1/completions", body, None)
        text, reason, usage = "", None, None
        try:
            async for event in _sse_events(response):
                usage = event.get("usage") or usage
                for choice in event.get("choices") or []:
                    piece = choice.get("text") or ""
                    text += piece
                    reason = choice.get("finish_reason") or reason
                    if piece:
                        yield RemoteDelta(self._tokenize(piece), piece)
        except httpx.HTTPError as exc:
            raise RuntimeError(f"worker {self.base_url} failed mid-stream: {type(exc).__name__}: {exc}") from exc
        finally:
            await response.aclose()
        if reason is None:
            raise RuntimeError(f"worker {self.base_url} ended the stream without a finish reason")
        usage = usage or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        output = RemoteOutput(
            request.rid,
            self._tokenize(text),
            text,
            usage.get("prompt_tokens", len(request.input_ids)),
            cached,
            reason,
        )
        yield RemoteDelta([], "", True, output)

    def flush_cache(self, cache_salt: str | None = None) -> bool:
        """SGLang's `/flush_cache`, else vLLM's `/reset_prefix_cache`; a server with neither keeps its cache."""
        for path in ("/flush_cache", "/reset_prefix_cache"):
            if self._sync_post(path, self._headers()).status_code == 200:
                return True
        return False

    def check_idle_invariant(self) -> None:
        """A foreign server's pages are its own business."""


def make_remote_worker(
    url: str, api_key: str | None, tokenize: Callable[[str], list[int]]
) -> RadixgateWorker | OpenAIWorker:
    kind, base_url = parse_worker_url(url)
    if kind == "radixgate":
        return RadixgateWorker(base_url, api_key)
    return OpenAIWorker(base_url, api_key, tokenize, kind)
