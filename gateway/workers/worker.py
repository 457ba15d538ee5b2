"""The one interface the routes use to reach an engine, and its co-located implementation.

A worker takes a `GenerateRequest` (token ids, `SamplingParams`, the tenant's salt), streams
`StreamDelta`s, aborts, reports stats and flushes its cache: the types of `radixgate.engine.protocol`.
Each kind declares the `SamplingParams` fields it cannot honour (`unsupported_fields`); the pool
routes a request only to members that honour every field it sets (`asked_fields`). `LocalWorker`
wraps the in-process `radixgate.engine.Engine` (loaded only when one is built);
`pool.WorkerPool` routes over many workers (local or HTTP) behind the same interface,
so no route knows which kind it talks to. Embeddings are a capability a worker declares
(`can_embed`, `embed`: workers/embeddings.py). A worker may also have `async start()` / `async
stop()`, which the app's lifespan awaits (the pool's health checks run between them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from radixgate.engine.config import EngineConfig
from radixgate.engine.protocol import EngineStats, GenerateRequest, SamplingParams, StreamDelta

from .embeddings import token_groups

if TYPE_CHECKING:
    from radixgate.engine.engine import Engine

FALLBACK_CHAT_ROLE_TAG = "<|{role}|>\n{content}\n"
# As vLLM does: temperatures this small mean greedy (dividing logits by them overflows), and a
# top_p that rounds to 0 in float32 would drop every token.
SAMPLING_EPS = 1e-5
MIN_TOP_P = 1e-6


def asked_fields(sampling: SamplingParams) -> frozenset[str]:
    """The `SamplingParams` fields a request sets to other than their defaults: what a worker must
    honour to serve it."""
    asked = set()
    for f in fields(sampling):
        value = getattr(sampling, f.name)
        if value != f.default and not (f.default is None and isinstance(value, (list, dict)) and not value):
            asked.add(f.name)  # an empty list or mapping asks for no more than None does
    return frozenset(asked)


def normalized(sampling: SamplingParams) -> SamplingParams:
    """As vLLM does: a temperature below `SAMPLING_EPS` is greedy, a top_p is at least `MIN_TOP_P`."""
    if sampling.temperature >= SAMPLING_EPS and sampling.top_p >= MIN_TOP_P:
        return sampling
    temperature = 0.0 if sampling.temperature < SAMPLING_EPS else sampling.temperature
    return replace(sampling, temperature=temperature, top_p=max(sampling.top_p, MIN_TOP_P))


def render_chat(tokenizer: Any, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The tokenizer's chat template with the generation prompt (shared by the engine and a router)."""
    if getattr(tokenizer, "chat_template", None):
        kwargs = {"tools": tools} if tools else {}
        return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False, **kwargs)
    # A checkpoint without a chat template still gets a readable, stable prompt.
    parts = [FALLBACK_CHAT_ROLE_TAG.format(role=m["role"], content=m["content"]) for m in messages]
    return "".join(parts) + "<|assistant|>\n"


class Worker(Protocol):
    """What the gateway needs from an engine, local or remote."""

    model_name: str

    @property
    def context_len(self) -> int: ...
    @property
    def unsupported_fields(self) -> frozenset[str]:
        """The `SamplingParams` fields this worker cannot honour: it is never sent a request setting one."""

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...
    def detokenize(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str: ...
    def render_chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str: ...
    def validate(self, request: GenerateRequest) -> None:
        """Raise ValueError, with a message saying what to change, if the engine would reject it."""

    def stream(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        """Stream deltas; closing the iterator early aborts the request and frees its pages."""

    def abort(self, rid: str) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    def flush_cache(self, cache_salt: str | None = None) -> bool:
        """Drop cached prefixes: every one, or only the namespace of `cache_salt` (one tenant's)."""

    def check_idle_invariant(self) -> None: ...
    def failure(self) -> str | None:
        """Why the worker can no longer serve, or None while it is healthy."""

    def close(self) -> None: ...


class LocalWorker:
    """The co-located engine: its loop runs on a background thread, bridged to asyncio by `Engine.stream`."""

    unsupported_fields: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.model_name: str = engine.model_name
        self.context_len: int = engine.context_len
        self.tokenizer = engine.tokenizer

    @classmethod
    def from_config(cls, engine_config: EngineConfig) -> LocalWorker:
        from radixgate.engine.engine import Engine  # the model code and torch, only when serving

        return cls(Engine(engine_config))

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def detokenize(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens))

    def render_chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        return render_chat(self.tokenizer, messages, tools)

    def validate(self, request: GenerateRequest) -> None:
        self.engine.validate(request.input_ids, normalized(request.sampling))

    def stream(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        if request.tenant_weight != 1.0 or request.cache_salt in self.engine.cache_manager.shares.weights:
            self.engine.cache_manager.set_tenant_weight(request.cache_salt, request.tenant_weight)
        return self.engine.stream(
            input_ids=request.input_ids,
            sampling=normalized(request.sampling),
            cache_salt=request.cache_salt,
            rid=request.rid,
        )

    can_embed = True  # embeddings.py

    async def embed(self, input_ids: list[list[int]], cache_salt: str | None = None) -> list[list[float]]:
        self.engine.start()  # the prefill runs in the engine's loop, never beside it (Engine.embed)
        vectors: list[list[float]] = []
        for group in token_groups(input_ids, self.context_len):  # one loop call each: decodes run between
            vectors += (await asyncio.to_thread(self.engine.embed, group)).tolist()
        return vectors

    def abort(self, rid: str) -> None:
        self.engine.abort(rid)

    def stats(self) -> dict[str, Any]:
        return dict(self.engine.stats())

    def engine_stats(self) -> EngineStats:
        return EngineStats.from_dict(self.engine.stats())

    def flush_cache(self, cache_salt: str | None = None) -> bool:
        return bool(self.engine.flush_cache(cache_salt) if cache_salt is not None else self.engine.flush_cache())

    def check_idle_invariant(self) -> None:
        self.engine.check_idle_invariant()

    def failure(self) -> str | None:
        return self.engine.fatal_error

    def close(self) -> None:
        self.engine.shutdown()
