"""What crosses the gateway↔engine boundary, importable without torch.

KV events in vLLM's wire format (`vllm/distributed/kv_events.py`): the event structs, the replay end
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
from collections.abc import Hashable, Sequence
from typing import Any

import cbor2
import msgspec

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
