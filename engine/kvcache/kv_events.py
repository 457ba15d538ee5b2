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
contract with routers and live in `radixgate.engine.protocol`, importable without torch; this module
holds the publisher and the recorder.

Tiers are vLLM's `medium`: "GPU" for the device pool (on a CPU engine too), "CPU" for HiCache's host
tier. A block demoted to host is a BlockRemoved on GPU and a BlockStored on CPU. Blocks written to
HiCache's shared remote store are announced with medium "REMOTE" when their write is queued; the
store evicts on its own, so those are hints that are never removed.

Which blocks a tree change touches: device nodes form a top subtree, so along any path the device
tokens are a prefix. A block belongs to the node holding its last token: a node covering path depths
[a, b) that appears on a tier stores the blocks ending in (a, b]; leaving the tier removes them.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..protocol import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_HASH_SEED,
    END_SEQ,
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    KVCacheEvent,
    block_digest,
    block_hashes,
    external_hash,
    first_block_extra_keys,
    root_digest,
)

log = logging.getLogger(__name__)

MEMO_NODES = 1 << 16  # tree nodes whose chain state the recorder remembers (then it starts over)


# ---- configuration -----------------------------------------------------------------------------
@dataclass(frozen=True)
class KVEventsConfig:
    """vLLM's `--kv-events-config` keys, plus `block_size`. An endpoint with `*` binds (port `*`: a
    free one), any other connects (to a subscriber that binds, as llm-d's endpoint picker does)."""

    enable_kv_cache_events: bool = False
    publisher: str = "zmq"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    topic: str = ""
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    block_size: int = DEFAULT_BLOCK_SIZE
    hash_seed: str = DEFAULT_HASH_SEED

    @classmethod
    def from_json(cls, text: str) -> KVEventsConfig:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"kv_events_config is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ValueError("kv_events_config must be a JSON object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"kv_events_config: unknown keys {unknown}; known: {sorted(known)}")
        config = cls(**raw)
        if config.publisher not in ("zmq", "null"):
            raise ValueError(f"kv_events_config publisher must be 'zmq' or 'null', got {config.publisher!r}")
        if config.block_size < 1 or config.buffer_steps < 1:
            raise ValueError("kv_events_config block_size and buffer_steps must be >= 1")
        return config

    @classmethod
    def loopback(cls) -> KVEventsConfig:
        """`--enable-kv-events`: publish and replay on free loopback ports."""
        return cls(True, "zmq", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*")


# ---- publisher ---------------------------------------------------------------------------------
class ZmqEventPublisher:
    """PUB socket plus a ROUTER replay socket, served by one thread; batches are buffered for replay."""

    def __init__(self, config: KVEventsConfig, data_parallel_rank: int = 0) -> None:
        import zmq

        self._zmq = zmq
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self.endpoint = self._open(self._pub, config.endpoint)
        self._replay = None
        self.replay_endpoint: str | None = None
        if config.replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self.replay_endpoint = self._open(self._replay, config.replay_endpoint)
        self.topic = config.topic
        self._topic = config.topic.encode()
        self._rank = data_parallel_rank
        self._queue: queue.Queue[EventBatch | None] = queue.Queue(maxsize=config.max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._encoder = msgspec.msgpack.Encoder()
        self.next_seq = 0
        self.num_dropped = 0
        self._thread = threading.Thread(target=self._run, name="radixgate-kv-events", daemon=True)
        self._thread.start()

    def _open(self, sock: Any, endpoint: str) -> str:
        """Binds an endpoint with a wildcard (a `*` port picks a free one), connects any other;
        returns the address subscribers use."""
        if "*" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
            host, _, port = endpoint.rpartition(":")
            if port == "*" and host.startswith("tcp://") and host != "tcp://*":
                return f"{host}:{sock.bind_to_random_port(host)}"
            sock.bind(endpoint)
            return str(sock.getsockopt_string(self._zmq.LAST_ENDPOINT))
        sock.connect(endpoint)
        return endpoint

    def publish(self, events: list[KVCacheEvent]) -> None:
        """Called on the engine loop: never blocks (a full queue drops the batch, counted)."""
        try:
            self._queue.put_nowait(EventBatch(time.time(), events, self._rank))
        except queue.Full:
            self.num_dropped += 1

    def _run(self) -> None:
        while True:
            if self._replay is not None and self._replay.poll(0):
                self._serve_replay()
            try:
                batch = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if batch is None:
                return
            payload = self._encoder.encode(batch)
            seq = self.next_seq
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            self._buffer.append((seq, payload))
            self.next_seq = seq + 1

    def _serve_replay(self) -> None:
        assert self._replay is not None
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            log.warning("ignoring a malformed KV-event replay request (%d frames)", len(frames))
            return
        client, _, start = frames
        start_seq = int.from_bytes(start, "big")
        for seq, payload in list(self._buffer):
            if seq >= start_seq:
                self._replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", END_SEQ, b""))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=2)
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()


# ---- the tree's observer -----------------------------------------------------------------------
class KVEventRecorder:
    """Turns radix-tree changes into block events; the engine publishes them once per step.

    Hooks (called by RadixCache and HiCache with the node that changed, before the change when it
    removes): `stored(node, medium)`, `removed(node, medium)`, `cleared()`."""

    def __init__(
        self, block_size: int, publisher: ZmqEventPublisher | None, hash_seed: str = DEFAULT_HASH_SEED
    ) -> None:
        self.block_size = block_size
        self.hash_seed = hash_seed
        self._root = root_digest(hash_seed)
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
            keys = first_block_extra_keys(namespace) if k == 0 else None
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
        recorder = cls(config.block_size, ZmqEventPublisher(config), config.hash_seed)
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
                "hash_seed": self.hash_seed,
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
        self.pending.append(
            BlockStored(hashes, parent, [t for c in chunks for t in c], self.block_size, None, medium, None, extra)
        )
        self.num_stored_blocks += len(hashes)

    def stored_prefix(self, tokens: Sequence[int], namespace: Hashable, medium: str) -> None:
        """The full blocks of `tokens` (from the root of `namespace`) are held on `medium`, e.g. written
        to HiCache's shared remote store. The store evicts silently: these are hints, never removed."""
        hashes = block_hashes(tokens, namespace, self.block_size, self.hash_seed)
        if hashes:
            extra = [first_block_extra_keys(namespace) if i == 0 else None for i in range(len(hashes))]
            n = len(hashes) * self.block_size
            self.pending.append(BlockStored(hashes, None, list(tokens[:n]), self.block_size, None, medium, None, extra))
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
