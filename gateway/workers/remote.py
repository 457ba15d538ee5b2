"""Workers behind HTTP: another `radixgate serve`, or any OpenAI-compatible server (vLLM, SGLang).

Both take token ids (the front gateway tokenized), stream deltas, and raise:
- `WorkerUnavailable` when the worker never took the request (refused connection, 502/503/504
  before admission), so the pool may retry it elsewhere;
- `WorkerError` (a `RuntimeError`) when the worker took it and failed it: an error event in its
  stream, a 500, a connection lost once sent; only that request fails, and it is not retried;
- `ValueError` when it rejects the request (4xx): the client's error, not the worker's.

A radixgate worker is a full engine: it gets every `SamplingParams` field through the native
`/generate` encoding and declares nothing unsupported. An OpenAI-compatible worker is sent the
fields OpenAI's and vLLM's completions both take, and declares the rest in `unsupported_fields`.

A radixgate worker gets the tenant's cache salt, and on `/generate` its weight in the cache's fair
shares, in headers on the worker channel (the shared `--worker-api-key`); it refuses them from anyone
else. A `vllm+http://` worker gets the salt as vLLM's `cache_salt` body field; a plain
`openai+http://` worker has no salt, so the pool refuses it tenant-salted requests unless
`--allow-unsalted-workers`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from typing import Any, ClassVar

import httpx

from radixgate.engine.protocol import TOP_LEVEL_FIELDS, GenerateOutput, GenerateRequest, StreamDelta

from ..observe.telemetry import trace_headers
from ..tenancy.auth import SALT_HEADER, WEIGHT_HEADER
from .failures import WorkerError, WorkerUnavailable, error_of, failed_on, is_down
from .native_output import native_output, output_logprobs
from .worker_http import CONNECT_TIMEOUT_S, KEEPALIVE_EXPIRY_S, WorkerConnections, WorkerResponse, sse_events

PROBE_TIMEOUT_S = 2.0
DRAIN_TIMEOUT_S = 1.0  # reading the rest of a body after its last event
SCHEMES = {"http": "radixgate", "https": "radixgate", "openai+http": "openai", "openai+https": "openai"}
SCHEMES |= {"vllm+http": "vllm", "vllm+https": "vllm"}
__all__ = ["WorkerError", "WorkerUnavailable", "failed_on", "is_down"]  # their home is failures.py


def parse_worker_url(url: str) -> tuple[str, str]:
    """`(kind, base_url)`: `http://h:p` is a radixgate worker; `openai+http://h:p` a foreign one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES or not rest:
        raise ValueError(
            f"worker URL '{url}': use http(s)://HOST:PORT for a radixgate worker, openai+http(s)://... for any "
            "OpenAI-compatible server, or vllm+http(s)://... for vLLM (tenant salts as cache_salt)"
        )
    return SCHEMES[scheme], f"{scheme.rsplit('+', 1)[-1]}://{rest.rstrip('/')}"


class HTTPWorker:
    """What both HTTP workers share: the client, probing, starting a stream with retryable failures."""

    kind = "radixgate"
    unsupported_fields: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.last_stats: dict[str, Any] = {}
        self._client: httpx.AsyncClient | None = None  # health checks and admin calls
        self._connections: WorkerConnections | None = None  # the requests' streams

    @property
    def supports_salt(self) -> bool:
        return self.kind == "vllm" or (self.kind == "radixgate" and self.api_key is not None)

    def _headers(self, cache_salt: str | None = None, tenant_weight: float | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if cache_salt is not None and self.kind == "radixgate" and self.api_key:
            headers[SALT_HEADER] = cache_salt
            if tenant_weight is not None:  # the tenant's weight in the worker's fair shares
                headers[WEIGHT_HEADER] = repr(float(tenant_weight))
        return headers

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:  # created on first use, in the event loop that serves requests
            timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)
            limits = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)  # as the streams': none races a close
            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, limits=limits)
        return self._client

    @property
    def connections(self) -> WorkerConnections:
        if self._connections is None:  # created on first use, in the event loop that serves requests
            self._connections = WorkerConnections(self.base_url)
        return self._connections

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._connections is not None:
            self._connections.close()
            self._connections = None

    async def _open(
        self, path: str, body: dict[str, Any], cache_salt: str | None, tenant_weight: float | None = None
    ) -> WorkerResponse:
        """Send the request and check its status; raises before any token is streamed."""
        # the request span is current: the worker joins it
        headers = trace_headers(self._headers(cache_salt, tenant_weight))
        return await self.connections.open(path, body, headers)

    async def probe(self) -> dict[str, Any]:
        """Raises unless the worker is healthy; returns its stats when it reports them."""
        response = await self.client.get("/health", headers=self._headers(), timeout=PROBE_TIMEOUT_S)
        if response.status_code != 200:  # the worker's own reason, "unhealthy: engine loop crashed: ..."
            try:
                reason = error_of(response.json())[0]
            except ValueError:
                reason = response.text[:500]
            raise WorkerUnavailable(f"/health answered {response.status_code}: {reason}")
        return {}

    def _sync_post(self, path: str, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(self.base_url + path, headers=headers, timeout=30.0)


class RadixgateWorker(HTTPWorker):
    """Another `radixgate serve`, driven through SGLang's native `/generate` with token ids."""

    kind = "radixgate"

    async def probe(self) -> dict[str, Any]:
        await super().probe()  # /health: 503 once its engine has stopped (/server_info still answers)
        response = await self.client.get("/server_info", headers=self._headers(), timeout=PROBE_TIMEOUT_S)
        response.raise_for_status()
        self.last_stats = response.json()
        if "workers" in self.last_stats:
            raise ValueError(f"{self.base_url} is itself a router; point --worker at engines")
        return self.last_stats

    def body(self, request: GenerateRequest) -> dict[str, Any]:
        """SGLang's `/generate` body with token ids: every sampling field, in the native encoding."""
        return {"input_ids": request.input_ids, "rid": request.rid, "stream": True, **request.sampling.to_native()}

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        response = await self._open("/generate", self.body(request), request.cache_salt, request.tenant_weight)
        ids: list[int] = []
        text = ""
        num_logprobs = 0
        try:
            async for event in sse_events(response.aiter_lines()):
                new_ids, new_text = event["output_ids"][len(ids) :], event["text"][len(text) :]
                ids, text = list(event["output_ids"]), event["text"]
                meta = event["meta_info"]
                delta = StreamDelta(new_ids, new_text, False)
                if request.sampling.return_logprob and meta.get("output_token_logprobs") is not None:
                    values, tops = output_logprobs(meta)
                    delta.token_logprobs, delta.top_logprobs = values[num_logprobs:], tops[num_logprobs:]
                    num_logprobs = len(values)
                if meta.get("finish_reason") is not None:
                    delta.finished, delta.output = True, native_output(request, ids, text, meta)
                yield delta
                if delta.finished:
                    await response.read_to_end(DRAIN_TIMEOUT_S)
                    return
        except httpx.TransportError as exc:
            raise RuntimeError(f"worker {self.base_url} failed mid-stream: {type(exc).__name__}: {exc}") from exc
        finally:
            response.close()
        raise RuntimeError(f"worker {self.base_url} ended the stream without a result")

    can_embed = True  # embeddings.py

    async def embed(self, input_ids: list[list[int]], cache_salt: str | None) -> list[list[float]]:
        """The worker's own `/v1/embeddings` with token ids, on the worker channel (same tenant)."""
        model = self.last_stats.get("served_model_name", "")  # from the health check's /server_info
        body = {"model": model, "input": input_ids, "encoding_format": "float"}
        response = await self._open("/v1/embeddings", body, cache_salt)
        try:
            data = json.loads(await response.read())["data"]
        finally:
            response.close()
        return [row["embedding"] for row in sorted(data, key=lambda row: row["index"])]

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
    # `SamplingParams` field -> the completions key it is sent as
    SENT_FIELDS: ClassVar[dict[str, str]] = {
        "max_new_tokens": "max_tokens",
        "temperature": "temperature",
        "top_p": "top_p",
        "seed": "seed",
        "stop": "stop",
        "top_k": "top_k",
        "min_p": "min_p",
        "ignore_eos": "ignore_eos",
        "stop_token_ids": "stop_token_ids",
    }
    # Not sent (each server spells them its own way, or answers them in a shape not parsed here).
    unsupported_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "frequency_penalty",
            "presence_penalty",
            "repetition_penalty",
            "logit_bias",
            "min_new_tokens",
            "skip_special_tokens",
            "json_schema",
            "regex",
            "ebnf",
            "json_any_whitespace",
            *TOP_LEVEL_FIELDS,  # logprobs, priority and TTL pins: radixgate workers only
        }
    )

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

    def body(self, request: GenerateRequest) -> dict[str, Any]:
        """`/v1/completions` with a token-id prompt: the fields of `SENT_FIELDS`, extensions only when set."""
        sampling = request.sampling
        body: dict[str, Any] = {
            "model": self.model or "default",
            "prompt": request.input_ids,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop_strings:
            body["stop"] = sampling.stop_strings
        # Extensions vLLM and SGLang both accept; sent only when set, so strict servers are not bothered.
        extras: dict[str, Any] = {"top_k": sampling.top_k, "min_p": sampling.min_p, "ignore_eos": sampling.ignore_eos}
        extras["stop_token_ids"] = list(sampling.stop_token_ids or ())
        body.update({k: v for k, v in extras.items() if v not in (-1, 0.0, False, [])})
        if self.kind == "vllm" and request.cache_salt is not None:
            body["cache_salt"] = request.cache_salt
        return body

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        response = await self._open("/v1/completions", self.body(request), None)
        text, reason, usage = "", None, None
        try:
            async for event in sse_events(response.aiter_lines()):
                usage = event.get("usage") or usage
                for choice in event.get("choices") or []:
                    piece = choice.get("text") or ""
                    text += piece
                    reason = choice.get("finish_reason") or reason
                    if piece:
                        yield StreamDelta(self._tokenize(piece), piece, False)
            await response.read_to_end(DRAIN_TIMEOUT_S)
        except httpx.TransportError as exc:
            raise RuntimeError(f"worker {self.base_url} failed mid-stream: {type(exc).__name__}: {exc}") from exc
        finally:
            response.close()
        if reason is None:
            raise RuntimeError(f"worker {self.base_url} ended the stream without a finish reason")
        usage = usage or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        output = GenerateOutput(
            request.rid,
            self._tokenize(text),
            text,
            usage.get("prompt_tokens", len(request.input_ids)),
            cached,
            reason,
        )
        yield StreamDelta([], "", True, output)

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
