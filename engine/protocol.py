"""What crosses the gateway↔engine boundary, importable without torch.

- `SamplingParams`: how to generate, with one native encoding (SGLang's `/generate` JSON:
  `sampling_params` plus the top-level logprob fields), `to_native()` / `from_native()`;
- `GenerateRequest`: one generation as a worker takes it (token ids, sampling, tenant salt, route hint);
- `GenerateOutput` / `StreamDelta`: what comes back, the final result and the pieces of a stream;
- `EngineStats`: the engine's counters, typed; `to_dict()` is the `stats()` / `/server_info` dict;
- KV events in vLLM's wire format (`vllm/distributed/kv_events.py`): the event structs, the replay end
marker, the tier names (vLLM's `medium`) and the block hashing that both the engine's publisher
(`kvcache/kv_events.py`) and a router following the events compute.

Block hashes are vLLM's `sha256_cbor` chain: sha256 over canonical CBOR of `(parent digest, token
ids, extra keys)`, the first block's parent being sha256_cbor of the hash seed (`hash_seed`, vLLM's
PYTHONHASHSEED, "0" by default) and its extra keys carrying the tenant's cache salt, so two tenants
never share a hash. Events carry the digest's last 8 bytes as an unsigned integer (vLLM's integer
block hashes), so llm-d's indexer, configured with the same block size and hash seed, computes the
same keys from a request's tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import cbor2
import msgspec

from .sampling_fields import check_field_kinds

MAX_TOP_LOGPROBS = 20  # as OpenAI's top_logprobs
LOGPROB_FIELDS = ("return_logprob", "top_logprobs_num", "logprob_start_len")  # top level of /generate
# Scheduling and retention, per request: also at the top level of /generate (SGLang's `priority`).
REQUEST_FIELDS = ("priority", "cache_pins", "cache_credit")
TOP_LEVEL_FIELDS = (*LOGPROB_FIELDS, *REQUEST_FIELDS)
MAX_PIN_TTL_S = 24 * 3600.0  # a pin lives at most a day (OpenAI's longest retention)
MAX_CREDIT_REQUESTS = 4096  # a template's static prefix looks at most this many requests younger
TopLogprobs = list[tuple[int, float]]  # (token id, logprob), best first


def check_cache_credit(tokens: int, requests: int) -> None:
    """A ValueError unless (tokens, requests) is a credit the engine takes (`SamplingParams.cache_credit`)."""
    if not (tokens >= 1 and 1 <= requests <= MAX_CREDIT_REQUESTS):
        raise ValueError(
            f"cache_credit is [prefix tokens >= 1, requests in [1, {MAX_CREDIT_REQUESTS}]], got {[tokens, requests]}"
        )


# ---- sampling ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    # Penalties and biases, applied to the raw logits in vLLM's way (engine/runner/penalties.py).
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] | None = None
    min_new_tokens: int = 0
    # Logprobs: the raw log-softmax of the model's logits, before any processor or temperature.
    return_logprob: bool = False
    top_logprobs_num: int = 0  # alternatives per position, at most MAX_TOP_LOGPROBS
    logprob_start_len: int = -1  # prompt logprobs from this prompt position on; -1: none
    skip_special_tokens: bool = True
    # Constrained decoding (SGLang's names), at most one of them; see engine/runner/grammar.py.
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    # False: JSON as json.dumps writes it, one space after ':' and ',' and no newlines (a random or
    # weak model given free whitespace can emit it forever); True: any whitespace between tokens.
    json_any_whitespace: bool = False
    # Not sampling, but per-request options that travel with it to every worker kind:
    # `priority` (SGLang's: higher first; honoured under enable_priority_scheduling), and
    # `cache_pins`, (prefix tokens, ttl seconds) pairs: hold that prefix of the prompt against
    # eviction for ttl seconds, each hit restarting it (kvcache/pins.py); `cache_credit`, empty or
    # (prefix tokens, requests): what the gateway gives a returning template's static prefix, kept
    # by the `template` eviction policy (kvcache/template_credit.py).
    priority: int = 0
    cache_pins: tuple[tuple[int, float], ...] = ()
    cache_credit: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.cache_pins, list):  # JSON's lists: kept as tuples, so equal requests compare equal
            pins = tuple(tuple(p) if isinstance(p, list) else p for p in self.cache_pins)
            object.__setattr__(self, "cache_pins", pins)
        if isinstance(self.cache_credit, list):
            object.__setattr__(self, "cache_credit", tuple(self.cache_credit))
        check_field_kinds(self)  # types, finiteness, seed range, UTF-8 text: sampling_fields.py
        for tokens, ttl in self.cache_pins:
            if tokens < 1 or not 0 < ttl <= MAX_PIN_TTL_S:
                raise ValueError(
                    f"cache_pins entries are [prefix tokens >= 1, ttl seconds in (0, {MAX_PIN_TTL_S:g}]], "
                    f"got [{tokens}, {ttl}]"
                )
        if self.cache_credit:
            check_cache_credit(*self.cache_credit)
        self._check_penalties_and_logprobs()
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 means greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (disabled) or >= 1, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        grammars = [k for k in ("json_schema", "regex", "ebnf") if getattr(self, k) is not None]
        if len(grammars) > 1:
            raise ValueError(f"give at most one of json_schema, regex and ebnf, got {' and '.join(grammars)}")
        if grammars and (self.ignore_eos or self.min_new_tokens):
            # the grammar's end allows only EOS, which these forbid: no token would be left to sample
            raise ValueError(
                f"{grammars[0]} ends the output where its grammar ends: drop ignore_eos and min_new_tokens"
            )

    @property
    def grammar_key(self) -> tuple[str, str, bool] | None:
        """(kind, source, any_whitespace) of the output's grammar, or None when unconstrained."""
        for kind in ("json_schema", "regex", "ebnf"):
            source = getattr(self, kind)
            if source is not None:
                return (kind, source, self.json_any_whitespace and kind == "json_schema")
        return None

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]

    @property
    def is_greedy(self) -> bool:
        # Temperatures this small only sharpen to argmax, and dividing by them overflows.
        return self.temperature < 1e-5 or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        return self.frequency_penalty != 0.0 or self.presence_penalty != 0.0 or self.repetition_penalty != 1.0

    def _check_penalties_and_logprobs(self) -> None:
        if not -2.0 <= self.frequency_penalty <= 2.0 or not -2.0 <= self.presence_penalty <= 2.0:
            raise ValueError(
                f"frequency_penalty and presence_penalty must be in [-2, 2], got "
                f"{self.frequency_penalty} and {self.presence_penalty}"
            )
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise ValueError(f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}")
        if self.logit_bias and any(not -100.0 <= v <= 100.0 for v in self.logit_bias.values()):
            raise ValueError("logit_bias values must be in [-100, 100]")
        if not isinstance(self.min_new_tokens, int) or not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens must be an integer in [0, max_new_tokens={self.max_new_tokens}], "
                f"got {self.min_new_tokens!r}"
            )
        if not 0 <= self.top_logprobs_num <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs_num must be in [0, {MAX_TOP_LOGPROBS}], got {self.top_logprobs_num}")
        if self.logprob_start_len < -1:
            raise ValueError(f"logprob_start_len must be -1 (no prompt logprobs) or >= 0, got {self.logprob_start_len}")

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.return_logprob and self.logprob_start_len >= 0

    # ---- the native encoding: SGLang's /generate JSON --------------------------------------------
    def to_native(self) -> dict[str, Any]:
        """`{"sampling_params": {...}, "return_logprob": .., "top_logprobs_num": .., "logprob_start_len": ..,
        "priority": .., "cache_pins": [[tokens, ttl_s], ...], "cache_credit": [tokens, requests] or []}`:
        every field, the logprob ones and the request ones at the top level as SGLang has them,
        logit_bias keys as strings."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        top = {name: values.pop(name) for name in TOP_LEVEL_FIELDS}
        top["cache_pins"] = [list(p) for p in top["cache_pins"]]
        top["cache_credit"] = list(top["cache_credit"])
        if values["logit_bias"] is not None:
            values["logit_bias"] = {str(k): v for k, v in values["logit_bias"].items()}
        return {"sampling_params": values, **top}

    @classmethod
    def from_native(cls, body: Mapping[str, Any]) -> SamplingParams:
        """The inverse of `to_native`; also takes SGLang's `sampling_seed` for `seed`. Raises ValueError
        naming a key that is not a field."""
        values = dict(body.get("sampling_params") or {})
        seed = values.pop("sampling_seed", None)
        if seed is not None:
            values["seed"] = seed
        values |= {name: body[name] for name in TOP_LEVEL_FIELDS if name in body}
        unknown = sorted(set(values) - NATIVE_FIELDS)
        if unknown:
            raise ValueError(f"unknown sampling fields {unknown}; known: {sorted(NATIVE_FIELDS)}")
        if values.get("logit_bias") is not None:
            try:
                values["logit_bias"] = {int(k): float(v) for k, v in values["logit_bias"].items()}
            except ValueError:
                raise ValueError("logit_bias keys must be token ids") from None
        return cls(**values)


NATIVE_FIELDS = frozenset(f.name for f in fields(SamplingParams))


# ---- requests and results ----------------------------------------------------------------------
@dataclass(frozen=True)
class GenerateRequest:
    """One generation as a worker takes it. `cache_salt` isolates tenants' prefix caches and never
    comes from a client; `route_hint` (prompt_cache_key / static_prefix_hash) is where a router sends
    a prefix no worker holds yet."""

    rid: str
    input_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    cache_salt: str | None = None
    route_hint: str | None = None
    tenant_weight: float = 1.0  # the tenant's weight in the cache's fair shares (never from a client)
    bootstrap: Bootstrap | None = None  # prefill/decode disaggregation: the request's KV handoff


@dataclass(frozen=True)
class Bootstrap:
    """SGLang's `bootstrap_host` / `bootstrap_port` / `bootstrap_room`: the prefill worker whose
    bootstrap server holds the request's KV handoff, and the room that pairs the two roles' copies."""

    host: str
    port: int
    room: int


@dataclass
class GenerateOutput:
    rid: str
    token_ids: list[int]
    text: str
    prompt_tokens: int
    cached_tokens: int
    finish_reason: str  # "stop" | "length" | "abort" | "error" (this request alone failed: see `error`)
    times: dict[str, float] = field(default_factory=dict)
    # cached_tokens split by the tier the KV came from: {"device": .., "host": .., "disk": .., "remote": ..}
    cached_tokens_by_tier: dict[str, int] = field(default_factory=dict)
    # With `return_logprob`: one entry per output token, and per prompt token from
    # `logprob_start_len` on (None for the first prompt token, which nothing predicts).
    output_token_logprobs: list[float] | None = None
    output_top_logprobs: list[TopLogprobs] | None = None
    input_token_logprobs: list[float | None] | None = None
    input_top_logprobs: list[TopLogprobs | None] | None = None
    error: str | None = None  # with finish_reason "error": what failed (the engine went on serving)
    # One entry per asked pin (`SamplingParams.cache_pins`), in order:
    # {"tokens": prefix tokens pinned, "ttl_s": .., "pinned": bool, "reason": None or why not}.
    cache_pins: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class StreamDelta:
    token_ids: list[int]
    text: str
    finished: bool
    output: GenerateOutput | None = None
    token_logprobs: list[float] | None = None  # of `token_ids`, with `return_logprob`
    top_logprobs: list[TopLogprobs] | None = None


# ---- stats -------------------------------------------------------------------------------------
@dataclass
class EngineStats:
    """The engine's counters. `to_dict()` is `Engine.stats()` and the base of `/server_info`: these
    names at the top level, `cache_hit_tokens_<tier>` per tier, and `extra` (the KV-event and HiCache
    keys) merged in."""

    model: str
    cache_hit_rate: float
    token_usage: float
    max_total_num_tokens: int
    tp_size: int = 1
    kv_heads_per_rank: int = 0
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    num_prefill_computed_tokens: int = 0
    num_finished_reqs: int = 0
    num_retracted_reqs: int = 0
    cuda_graph: str = "off"  # "on", or "off: why"
    cuda_graph_steps: int = 0
    overlap_steps: int = 0
    available_tokens: int = 0
    evictable_tokens: int = 0
    protected_tokens: int = 0
    page_size: int = 1
    kv_cache_dtype: str = "auto"
    context_len: int = 0
    disable_radix_cache: bool = False
    prefix_cache_hits_by_tier: dict[str, int] = field(default_factory=dict)
    hicache_enabled: bool = False
    kv_events: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out["prefix_cache_hits_by_tier"] = dict(self.prefix_cache_hits_by_tier)
        out |= {f"cache_hit_tokens_{tier}": n for tier, n in self.prefix_cache_hits_by_tier.items()}
        return out | self.extra

    @classmethod
    def from_dict(cls, stats: Mapping[str, Any]) -> EngineStats:
        """From `to_dict()`'s shape (a remote engine's `/server_info`): unknown keys go to `extra`."""
        tiers = dict(stats.get("prefix_cache_hits_by_tier") or {})
        derived = {f"cache_hit_tokens_{tier}" for tier in tiers}
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in stats.items() if k in known}
        extra = {k: v for k, v in stats.items() if k not in known and k not in derived}
        values.setdefault("model", "")
        values.setdefault("cache_hit_rate", 0.0)
        values.setdefault("token_usage", 0.0)
        values.setdefault("max_total_num_tokens", 0)
        return cls(**values, extra=extra)


# ---- KV events ---------------------------------------------------------------------------------
MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"
MEDIUM_REMOTE = "REMOTE"  # HiCache's store shared by every worker (not a vLLM medium; radixgate's own)
END_SEQ = (-1).to_bytes(8, "big", signed=True)
DEFAULT_BLOCK_SIZE = 16
DEFAULT_HASH_SEED = "0"


class EventBatch(msgspec.Struct, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base of the tagged events: encoded as a map with "type" naming the class."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


def sha256_cbor(value: Any) -> bytes:
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def root_digest(hash_seed: str) -> bytes:
    """The parent of every first block (vLLM's NONE_HASH for a given PYTHONHASHSEED)."""
    return sha256_cbor(hash_seed)


def block_digest(parent: bytes, tokens: Sequence[int], extra_keys: tuple[Any, ...] | None) -> bytes:
    """One link of the chain: the digest of a block from its parent's digest."""
    return sha256_cbor((parent, tuple(tokens), extra_keys))


def external_hash(digest: bytes) -> int:
    return int.from_bytes(digest[-8:], "big")


def first_block_extra_keys(cache_salt: Hashable) -> tuple[Any, ...] | None:
    return None if cache_salt is None else (str(cache_salt),)


def block_hashes(
    token_ids: Sequence[int], cache_salt: Hashable, block_size: int, hash_seed: str = DEFAULT_HASH_SEED
) -> list[int]:
    """The external hash of every full block of `token_ids` under a tenant's salt (what a router
    computes for a request to look its prefix up in the engines' events)."""
    out: list[int] = []
    parent = root_digest(hash_seed)
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        extra = first_block_extra_keys(cache_salt) if start == 0 else None
        parent = block_digest(parent, token_ids[start : start + block_size], extra)
        out.append(external_hash(parent))
    return out
