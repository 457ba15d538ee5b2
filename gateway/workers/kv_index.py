"""The router's exact view of one worker's cache, kept from the worker's KV events.

A `KVEventIndex` subscribes to the ZMQ endpoint the worker advertises in `/server_info`
(`kv_events`), applies every `BlockStored` / `BlockRemoved` / `AllBlocksCleared` to a set of block
hashes per medium, and answers how many leading blocks of a request the worker holds on its device
and in its other tiers. The request's blocks are hashed exactly as the engine hashes them (chained,
the tenant's salt in the first block, both keyed by the cache secret), so a prefix cached under
another salt never matches. The gateway and its workers need the same secret
(`RADIXGATE_CACHE_SECRET_FILE`); the worker advertises its secret's id and a mismatch is logged.

A worker whose events speak CURVE advertises its public key (`curve_server_key`); the index then
authenticates with the key pair in `RADIXGATE_KV_EVENTS_CLIENT_KEY_FILE` (a `zmq.auth` certificate
with the secret key, whose public half the worker allows).

It stays exact by sequence numbers: a gap, or a health check reporting a newer sequence than the
index has applied, asks the worker's replay socket for everything from the first missing number.
While it is behind (`is_synced` False) the router falls back to its approximate index.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import msgspec
import zmq

from radixgate.engine.cache_secret import CacheSecret, load_cache_secret
from radixgate.engine.protocol import END_SEQ, MEDIUM_GPU, MEDIUM_REMOTE, block_hashes

log = logging.getLogger(__name__)
# A block held in host memory or on disk is loaded, not recomputed: worth this share of a device hit.
LOWER_TIER_CREDIT = 0.5
STALE_AFTER_S = 1.0  # behind the worker's sequence this long (replay did not catch up): not synced
CLIENT_KEY_FILE_ENV = "RADIXGATE_KV_EVENTS_CLIENT_KEY_FILE"


def curve_client(info: dict[str, Any]) -> tuple[bytes, bytes, bytes] | None:
    """(server public key, client public key, client secret key) for a worker whose events speak
    CURVE; None for one that does not. Raises ValueError when no client key is configured."""
    server_key = info.get("curve_server_key")
    if not server_key:
        return None
    path = os.environ.get(CLIENT_KEY_FILE_ENV)
    if not path:
        raise ValueError(f"its KV events need CURVE keys: set {CLIENT_KEY_FILE_ENV} (--kv-events-client-key-file)")
    from zmq.auth import load_certificate

    public, secret = load_certificate(path)
    if secret is None:
        raise ValueError(f"{CLIENT_KEY_FILE_ENV}={path} holds no secret key (use the .key_secret file)")
    return str(server_key).encode(), public, secret


def reachable(endpoint: str, worker_url: str) -> str:
    """A published endpoint bound on a wildcard (`tcp://*:5557`, `tcp://0.0.0.0:…`) is reached at
    the worker's host."""
    scheme, _, rest = endpoint.partition("://")
    host, _, port = rest.rpartition(":")
    if host in ("*", "0.0.0.0", "[::]", "::"):
        host = urlsplit(worker_url).hostname or "127.0.0.1"
    return f"{scheme}://{host}:{port}"


_last_hashes: tuple[Any, list[int]] | None = None  # the last request's chain, shared by every worker's index


def _request_hashes(input_ids: Sequence[int], salt: Any, block_size: int, hash_seed: str) -> list[int]:
    """`block_hashes` of a request, computed once for all the workers a routing decision asks in turn:
    workers with the same secret, block size and seed announce the same chain. One entry is kept."""
    global _last_hashes
    key = (salt, block_size, hash_seed, tuple(input_ids))
    last = _last_hashes
    if last is None or last[0] != key:
        last = _last_hashes = (key, block_hashes(input_ids, salt, block_size, hash_seed))
    return last[1]


class KVEventIndex:
    def __init__(
        self,
        worker_url: str,
        info: dict[str, Any],
        shared_remote: set[int] | None = None,
        secret: CacheSecret | None = None,
    ) -> None:
        from radixgate.engine.kvcache.kv_events import secret_id

        self.worker_url = worker_url
        self.secret = (secret if secret is not None else load_cache_secret()) if info.get("keyed_hashes") else None
        self.curve = curve_client(info)
        if self.secret is not None and info.get("secret_id") not in (None, secret_id(self.secret)):
            log.warning(
                "KV events of %s are keyed by another cache secret than this gateway's: exact routing to it "
                "never matches; give both the same RADIXGATE_CACHE_SECRET_FILE",
                worker_url,
            )
        self.endpoint = reachable(info["endpoint"], worker_url)
        self.replay_endpoint = reachable(info["replay_endpoint"], worker_url) if info.get("replay_endpoint") else None
        self.topic = str(info.get("topic") or "")
        self.block_size = int(info["block_size"])
        self.hash_seed = str(info.get("hash_seed", "0"))
        self.events_hash_seed = self.secret.events_hash_seed(self.hash_seed) if self.secret else self.hash_seed
        self.blocks: dict[int, set[str]] = {}
        # Blocks in HiCache's remote store, pooled across the workers of one gateway: any of them loads them.
        self.shared_remote: set[int] = shared_remote if shared_remote is not None else set()
        self.last_seq = -1  # the last batch applied
        self.num_batches = 0
        self.num_replays = 0
        self.num_gaps = 0
        self._behind_since: float | None = None
        self._lock = threading.Lock()
        self._decoder = msgspec.msgpack.Decoder()
        self._stop = threading.Event()
        self._ctx = zmq.Context()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="radixgate-kv-index", daemon=True)
        self._thread.start()
        self._ready.wait(5)

    # ---- what the router asks ----------------------------------------------------------------
    def match_tokens(self, input_ids: Sequence[int], cache_salt: str | None) -> int:
        """Tokens of the request's prefix the worker holds: device blocks, then lower tiers at partial credit."""
        salt = cache_salt if cache_salt is None or self.secret is None else self.secret.events_salt(cache_salt)
        hashes = _request_hashes(input_ids, salt, self.block_size, self.events_hash_seed)
        device = lower = 0
        with self._lock:
            for h in hashes:
                media = self.blocks.get(h)
                if not media and h not in self.shared_remote:
                    break
                if media and MEDIUM_GPU in media and not lower:
                    device += 1
                else:
                    lower += 1
        return int((device + LOWER_TIER_CREDIT * lower) * self.block_size)

    @property
    def is_synced(self) -> bool:
        """False once the index has stayed behind the worker's sequence for `STALE_AFTER_S` (a batch
        in flight is not staleness), or its subscriber thread died."""
        behind = self._behind_since
        return self._thread.is_alive() and (behind is None or time.monotonic() - behind < STALE_AFTER_S)

    def observe_worker_seq(self, next_seq: int) -> None:
        """A health check saw the worker at `next_seq`: if the index is behind, replay; if it stays
        behind, it is stale until it catches up."""
        if next_seq - 1 <= self.last_seq:
            self._behind_since = None
            return
        now = time.monotonic()
        if self._behind_since is None:
            self._behind_since = now
            self._want_replay = True
        elif now - self._behind_since > STALE_AFTER_S:
            log.debug("KV index of %s is behind (%d < %d)", self.worker_url, self.last_seq, next_seq - 1)
            self._want_replay = True

    def num_blocks(self) -> int:
        return len(self.blocks)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._ctx.term()

    # ---- the subscriber thread ---------------------------------------------------------------
    _want_replay = True  # a fresh index replays from the start of the worker's buffer

    def _socket(self, kind: int) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        if self.curve is not None:
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = self.curve
        return sock

    def _run(self) -> None:
        sub = self._socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, self.topic.encode())
        sub.connect(self.endpoint)
        self._ready.set()
        try:
            while not self._stop.is_set():
                if self._want_replay and self.replay_endpoint:
                    self._want_replay = False
                    self._replay(self.last_seq + 1)
                if not sub.poll(50):
                    continue
                _, seq_bytes, payload = sub.recv_multipart()
                seq = int.from_bytes(seq_bytes, "big")
                if seq <= self.last_seq:
                    continue
                if seq != self.last_seq + 1:  # missed batches (or joined late): fetch them first
                    self.num_gaps += 1
                    if self.replay_endpoint and self._replay(self.last_seq + 1) and seq <= self.last_seq:
                        continue
                self._apply(seq, payload)
        finally:
            sub.close(linger=0)

    def _replay(self, start_seq: int) -> bool:
        """Applies the worker's buffered batches from `start_seq`; False when the worker did not answer."""
        assert self.replay_endpoint is not None
        dealer = self._socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        try:
            dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
            while dealer.poll(2000):
                _, seq_bytes, payload = dealer.recv_multipart()
                if seq_bytes == END_SEQ:
                    self.num_replays += 1
                    return True
                seq = int.from_bytes(seq_bytes, "big")
                if seq > self.last_seq:
                    self._apply(seq, payload)
            return False
        finally:
            dealer.close(linger=0)

    def _apply(self, seq: int, payload: bytes) -> None:
        batch = self._decoder.decode(payload)
        with self._lock:
            for event in batch.get("events", ()):
                kind = event.get("type")
                medium = event.get("medium") or MEDIUM_GPU
                if kind == "BlockStored" and medium == MEDIUM_REMOTE:
                    self.shared_remote.update(event["block_hashes"])
                elif kind == "BlockStored":
                    for h in event["block_hashes"]:
                        self.blocks.setdefault(h, set()).add(medium)
                elif kind == "BlockRemoved":
                    for h in event["block_hashes"]:
                        media = self.blocks.get(h)
                        if media is not None:
                            media.discard(medium)
                            if not media:
                                del self.blocks[h]
                elif kind == "AllBlocksCleared":
                    self.blocks.clear()
            self.last_seq = seq
            self.num_batches += 1
