"""The one interface the routes use to reach an engine, and its co-located implementation.

A worker takes token ids and sampling settings, streams deltas, aborts, reports stats and
flushes its cache. `LocalWorker` wraps the in-process `radixgate.engine.Engine`;
`worker_pool.WorkerPool` routes over many workers (local or HTTP) behind the same interface,
so no route knows which kind it talks to. A worker may also have `async start()` / `async
stop()`, which the app's lifespan awaits (the pool's health checks run between them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

FALLBACK_CHAT_ROLE_TAG = "<|{role}|>\n{content}\n"
# As vLLM does: temperatures this small mean greedy (dividing logits by them overflows), and a
# top_p that rounds to 0 in float32 would drop every token.
SAMPLING_EPS = 1e-5
MIN_TOP_P = 1e-6


@dataclass(frozen=True)
class WorkRequest:
    """One generation. `cache_salt` isolates tenants' prefix caches; it never comes from a client."""

    rid: str
    input_ids: list[int]
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    cache_salt: str | None = None
    route_hint: str | None = None  # prompt_cache_key / static_prefix_hash: where a new prefix should go
    # constrained decoding, at most one (see structured_output.py); JSON compact unless any_whitespace
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    json_any_whitespace: bool = False
    # penalties and biases (vLLM's semantics), logprobs (raw, before any of them): see engine/runner/
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    min_new_tokens: int = 0
    return_logprob: bool = False
    top_logprobs_num: int = 0
    logprob_start_len: int = -1  # prompt logprobs from this position; -1: none
    skip_special_tokens: bool = True


def render_chat(tokenizer: Any, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The tokenizer's chat template with the generation prompt (shared by the engine and a router)."""
    if getattr(tokenizer, "chat_template", None):
        kwargs = {"tools": tools} if tools else {}
        return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False, **kwargs)
    # A checkpoint without a chat template still gets a readable, stable prompt.
    parts = [FALLBACK_CHAT_ROLE_TAG.format(role=m["role"], content=m["content"]) for m in messages]
    return "".join(parts) + "<|assistant|>\n"


class Output(Protocol):
    """The final result of a request (the engine's `GenerateOutput` has these fields)."""

    rid: str
    token_ids: list[int]
    text: str
    prompt_tokens: int
    cached_tokens: int
    finish_reason: str
    times: dict[str, float]


class Delta(Protocol):
    """A piece of a stream; `output` is set on the final delta only."""

    token_ids: list[int]
    text: str
    finished: bool
    output: Output | None


class Worker(Protocol):
    """What the gateway needs from an engine, local or remote."""

    model_name: str
    context_len: int

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...
    def detokenize(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str: ...
    def render_chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str: ...
    def validate(self, request: WorkRequest) -> None:
        """Raise ValueError, with a message saying what to change, if the engine would reject it."""

    def stream(self, request: WorkRequest) -> AsyncIterator[Delta]:
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

    def __init__(self, engine: Any) -> None:
        from radixgate.engine import SamplingParams  # heavy import, only when serving

        self.engine = engine
        self._sampling_cls = SamplingParams
        self.model_name: str = engine.model_name
        self.context_len: int = engine.context_len
        self.tokenizer = engine.tokenizer

    @classmethod
    def from_config(cls, engine_config: Any) -> LocalWorker:
        from radixgate.engine import Engine

        return cls(Engine(engine_config))

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def detokenize(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def render_chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        return render_chat(self.tokenizer, messages, tools)

    def _sampling(self, request: WorkRequest) -> Any:
        return self._sampling_cls(
            max_new_tokens=request.max_new_tokens,
            temperature=0.0 if request.temperature < SAMPLING_EPS else request.temperature,
            top_p=max(request.top_p, MIN_TOP_P),
            top_k=request.top_k,
            min_p=request.min_p,
            seed=request.seed,
            stop=list(request.stop) or None,
            stop_token_ids=list(request.stop_token_ids) or None,
            ignore_eos=request.ignore_eos,
            json_schema=request.json_schema,
            regex=request.regex,
            ebnf=request.ebnf,
            json_any_whitespace=request.json_any_whitespace,
            frequency_penalty=request.frequency_penalty,
            presence_penalty=request.presence_penalty,
            repetition_penalty=request.repetition_penalty,
            logit_bias=dict(request.logit_bias) or None,
            min_new_tokens=request.min_new_tokens,
            return_logprob=request.return_logprob,
            top_logprobs_num=request.top_logprobs_num,
            logprob_start_len=request.logprob_start_len,
            skip_special_tokens=request.skip_special_tokens,
        )

    def validate(self, request: WorkRequest) -> None:
        self.engine.validate(request.input_ids, self._sampling(request))

    def stream(self, request: WorkRequest) -> AsyncIterator[Delta]:
        return self.engine.stream(
            input_ids=request.input_ids,
            sampling=self._sampling(request),
            cache_salt=request.cache_salt,
            rid=request.rid,
        )

    def abort(self, rid: str) -> None:
        self.engine.abort(rid)

    def stats(self) -> dict[str, Any]:
        return dict(self.engine.stats())

    def flush_cache(self, cache_salt: str | None = None) -> bool:
        return bool(self.engine.flush_cache(cache_salt) if cache_salt is not None else self.engine.flush_cache())

    def check_idle_invariant(self) -> None:
        self.engine.check_idle_invariant()

    def failure(self) -> str | None:
        return getattr(self.engine, "fatal_error", None)

    def close(self) -> None:
        self.engine.shutdown()
