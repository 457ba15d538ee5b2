"""KV events in vLLM's wire format: which blocks of KV this engine stored and removed, per tier.

Routers (radixgate's, llm-d's precise prefix-cache scorer, NVIDIA Dynamo's) subscribe to them to know
exactly what each engine caches. The format is vLLM's (`vllm/distributed/kv_events.py`):

- a ZMQ PUB socket sends multipart messages `(topic, sequence number as 8 bytes big-endian,
  msgpack EventBatch)`; EventBatch is `{ts, events, data_parallel_rank}` and each event a tagged map
  (`{"type": "BlockStored", ...}`, `BlockRemoved`, `AllBlocksCleared`);
- a ROUTER socket answers a replay request (an 8-byte start sequence number) with every buffered
  batch from that number on, `(sequence, payload)` each, then the end marker `(-1, b"")`.

Blocks are `block_size` tokens (16 by default, independent of the engine's page size). The event
structs and the block hashing (vLLM's `sha256_cbor` chain, salted per tenant) are the engine's
contract with routers and live in `radixgate.engine.protocol`, importable without torch; the sockets
and their configuration are `event_publisher.py`; this module holds the recorder.

What a listener learns is kept to what routing needs: `token_ids` are empty unless the config's
`include_token_ids` asks for them, and the chain is keyed by the deployment's cache secret
(`cache_secret.py`): its root is vLLM's `sha256_cbor(seed)` with seed `events_hash_seed(hash_seed)`,
and a tenant's salt enters the first block's extra keys as `events_salt(salt)`, so neither a prompt
guessed by a listener nor a tenant's name gives a hash it can check. A vLLM-format consumer
(llm-d's indexer) configured with that seed computes the same hashes for unsalted requests; one
that can only be given the plain seed needs the config's `"keyed_hashes": false` (vLLM's chain from
`hash_seed` itself, tenants' salts as they are: only where nobody else can reach the socket).

Tiers are vLLM's `medium`: "GPU" for the device pool (on a CPU engine too), "CPU" for HiCache's host
tier. A block demoted to host is a BlockRemoved on GPU and a BlockStored on CPU. Blocks written to
HiCache's shared remote store are announced with medium "REMOTE" when their write is queued; the
store evicts on its own, so those are hints that are never removed.

Which blocks a tree change touches: device nodes form a top subtree, so along any path the device
tokens are a prefix. A block belongs to the node holding its last token: a node covering path depths
[a, b) that appears on a tier stores the blocks ending in (a, b]; leaving the tier removes them.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from typing import Any

from ..cache_secret import CacheSecret, load_cache_secret
from ..protocol import (
    DEFAULT_HASH_SEED,
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVCacheEvent,
    block_digest,
    block_hashes,
    external_hash,
    first_block_extra_keys,
    root_digest,
)
from .event_publisher import KVEventsConfig, ZmqEventPublisher

__all__ = ["KVEventRecorder", "KVEventsConfig", "ZmqEventPublisher", "keyed_salt"]

log = logging.getLogger(__name__)

MEMO_NODES = 1 << 16  # tree nodes whose chain state the recorder remembers (then it starts over)


# ---- the tree's observer -----------------------------------------------------------------------
class KVEventRecorder:
    """Turns radix-tree changes into block events; the engine publishes them once per step.

    Hooks (called by RadixCache and HiCache with the node that changed, before the change when it
    removes): `stored(node, medium)`, `removed(node, medium)`, `cleared()`."""

    def __init__(
        self,
        block_size: int,
        publisher: ZmqEventPublisher | None,
        hash_seed: str = DEFAULT_HASH_SEED,
        secret: CacheSecret | None = None,
        include_token_ids: bool = False,
        keyed_hashes: bool = True,
    ) -> None:
        self.block_size = block_size
        self.hash_seed = hash_seed
        self.secret = (secret if secret is not None else load_cache_secret()) if keyed_hashes else None
        # what the chain is computed with
        self.events_hash_seed = self.secret.events_hash_seed(hash_seed) if self.secret is not None else hash_seed
        self.include_token_ids = include_token_ids
        self._root = root_digest(self.events_hash_seed)
        self.publisher = publisher
        self.pending: list[KVCacheEvent] = []
        self.num_stored_blocks = 0
        self.num_removed_blocks = 0
        # id(node) -> (node, its chain state): the node is kept so that an id is never reused while memoized
        self._memo: dict[int, tuple[Any, tuple[int, bytes, Hashable]]] = {}

    def _blocks(self, node: Any) -> tuple[list[int], list[list[int]], int | None, list[tuple[Any, ...] | None]]:
        """The blocks whose last token lies in `node`: (hashes, their tokens, the parent hash of the
        first, each block's extra keys). The chain starts from the parent's memoized state (the digest at
        the last block boundary at or before the parent's end), so a tree change hashes its own blocks,
        not the whole path from the root."""
        boundary, digest, namespace = self._state(node.parent)
        bs = self.block_size
        end = node.depth
        need = end - len(node.key) - boundary  # path tokens between the boundary and the node (< bs)
        tail: list[int] = []
        walk = node.parent
        while need > 0:
            take = walk.key[-need:]
            tail[:0] = take
            need -= len(take)
            walk = walk.parent
        tokens = tail + list(node.key)
        parent_hash = external_hash(digest) if boundary else None
        hashes: list[int] = []
        chunks: list[list[int]] = []
        extra: list[tuple[Any, ...] | None] = []
        for k in range(boundary // bs, end // bs):
            chunk = tokens[k * bs - boundary : (k + 1) * bs - boundary]
            keys = first_block_extra_keys(keyed_salt(self.secret, namespace)) if k == 0 else None
            digest = block_digest(digest, chunk, keys)
            hashes.append(external_hash(digest))
            chunks.append(chunk)
            extra.append(keys)
        if len(self._memo) >= MEMO_NODES:
            self._memo.clear()
        self._memo[id(node)] = (node, (end - end % bs, digest, namespace))
        return hashes, chunks, parent_hash, extra

    def _state(self, node: Any) -> tuple[int, bytes, Hashable]:
        """(block boundary at or before the node's end, the chain's digest there, the namespace); nodes on
        the way up without a memoized state are computed top-down. A node's path never changes (a split
        inserts an upper node; the lower one keeps its tokens and depth), so a state stays valid."""
        chain = []
        walk = node
        while walk.parent is not None:
            entry = self._memo.get(id(walk))
            if entry is not None and entry[0] is walk:
                break
            chain.append(walk)
            walk = walk.parent
        for missing in reversed(chain):
            self._blocks(missing)
        if node.parent is None:
            return 0, self._root, node.namespace
        return self._memo[id(node)][1]

    @classmethod
    def attach(cls, config: KVEventsConfig | None, radix_cache: Any) -> KVEventRecorder | None:
        """A recorder publishing per `config`, hooked into `radix_cache`; None when events are off."""
        if config is None or radix_cache is None:
            return None
        secret = load_cache_secret()
        if config.keyed_hashes and not secret.is_configured:
            log.warning(
                "KV events: no cache secret set (RADIXGATE_CACHE_SECRET_FILE or RADIXGATE_CACHE_SECRET): block "
                "hashes are keyed by a random per-process secret, which a router in another process does not share"
            )
        publisher = ZmqEventPublisher(config)
        recorder = cls(
            config.block_size, publisher, config.hash_seed, secret, config.include_token_ids, config.keyed_hashes
        )
        radix_cache.events = recorder
        return recorder

    def info(self, capacity_tokens: int) -> dict[str, Any]:
        """What `/server_info` advertises: where a router subscribes, and the pool in blocks."""
        pub = self.publisher
        events = None
        if pub is not None:
            events = {
                "endpoint": pub.endpoint,
                "replay_endpoint": pub.replay_endpoint,
                "topic": pub.topic,
                "block_size": self.block_size,
                "hash_seed": self.hash_seed,  # as configured: the chain's seed is keyed by the secret
                "keyed_hashes": self.secret is not None,
                "secret_id": secret_id(self.secret) if self.secret is not None else None,
                "curve_server_key": pub.curve_server_key,
                "include_token_ids": self.include_token_ids,
                "next_seq": pub.next_seq,
                "num_stored_blocks": self.num_stored_blocks,
                "num_removed_blocks": self.num_removed_blocks,
            }
        return {
            "kv_events": events,
            "kv_events_block_size": self.block_size,
            "num_gpu_blocks": capacity_tokens // self.block_size,
        }

    def stored(self, node: Any, medium: str = MEDIUM_GPU) -> None:
        hashes, chunks, parent, extra = self._blocks(node)
        if not hashes:
            return
        token_ids = [t for c in chunks for t in c] if self.include_token_ids else []
        self.pending.append(BlockStored(hashes, parent, token_ids, self.block_size, None, medium, None, extra))
        self.num_stored_blocks += len(hashes)

    def stored_prefix(self, tokens: Sequence[int], namespace: Hashable, medium: str) -> None:
        """The full blocks of `tokens` (from the root of `namespace`) are held on `medium`, e.g. written
        to HiCache's shared remote store. The store evicts silently: these are hints, never removed."""
        salt = keyed_salt(self.secret, namespace)
        hashes = block_hashes(tokens, salt, self.block_size, self.events_hash_seed)
        if hashes:
            extra = [first_block_extra_keys(salt) if i == 0 else None for i in range(len(hashes))]
            token_ids = list(tokens[: len(hashes) * self.block_size]) if self.include_token_ids else []
            self.pending.append(BlockStored(hashes, None, token_ids, self.block_size, None, medium, None, extra))
            self.num_stored_blocks += len(hashes)

    def removed(self, node: Any, medium: str = MEDIUM_GPU) -> None:
        hashes = self._blocks(node)[0]
        if hashes:
            self.pending.append(BlockRemoved(hashes, medium))
            self.num_removed_blocks += len(hashes)

    def cleared(self) -> None:
        self.pending.append(AllBlocksCleared())
        self._memo.clear()

    def flush(self) -> None:
        """Publishes what this step recorded as one batch."""
        if self.pending:
            if self.publisher is not None:
                self.publisher.publish(self.pending)
            self.pending = []

    def close(self) -> None:
        self.flush()
        if self.publisher is not None:
            self.publisher.close()


def keyed_salt(secret: CacheSecret | None, cache_salt: Hashable) -> Hashable:
    """A tenant's cache salt as the KV events' hashes carry it (None: no salt; no secret: unkeyed)."""
    if cache_salt is None or secret is None:
        return cache_salt
    return secret.events_salt(str(cache_salt))


def secret_id(secret: CacheSecret) -> str:
    """Names the secret without revealing it, so a router can tell that its own differs."""
    return secret.derive("secret id").hex()[:16]
