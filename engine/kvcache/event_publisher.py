"""The KV events' ZMQ side: `--kv-events-config` (vLLM's keys and radixgate's), the publisher socket
and the replay socket (wire format: `kv_events.py`).

Where it listens. An endpoint that binds is a loopback one (`tcp://127.0.0.1:5557`, the default),
one whose port is `*` (a free port), an `ipc://` or `inproc://` one, or any with `"bind": true`; an
endpoint with another host, or any with `"bind": false`, connects to a subscriber that binds (llm-d's
endpoint picker). The replay socket always binds. A wildcard
host (`*`, `0.0.0.0`, `::`) listens on every interface: refused unless `"allow_wildcard": true`.

Delivery. ZMQ's PUB drops what it sends before a subscriber's subscription has reached it. A bound
publisher has subscribers that come and go; one that joins late asks the replay socket for what it
missed. A connecting publisher has one subscriber, which the connection may not have reached yet
(at start, or after the subscriber restarted): the socket is an XPUB, which hears each subscription,
and batches published before one arrives are held (up to `buffer_steps`) and sent as it arrives.
Connections, disconnections and failed handshakes are logged.

Privacy. Blocks' `token_ids` are sent only with `"include_token_ids": true` (a prompt's tokens are
its text); block hashes and the tenant salts in them are keyed by the cache secret (`kv_events.py`).
With `"curve_secret_key_file"` (a `zmq.auth` certificate holding the publisher's secret key) both
sockets speak CURVE: a subscriber needs the publisher's public key (advertised as
`curve_server_key`) and a key pair whose public half is in `"curve_allowed_clients_dir"`;
any other gets nothing.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import msgspec

from ..protocol import DEFAULT_BLOCK_SIZE, DEFAULT_HASH_SEED, END_SEQ, EventBatch, KVCacheEvent

log = logging.getLogger(__name__)

WILDCARD_HOSTS = ("*", "0.0.0.0", "::", "[::]")


def _tcp_host_port(endpoint: str) -> tuple[str, str] | None:
    if not endpoint.startswith("tcp://"):
        return None
    host, _, port = endpoint[len("tcp://") :].rpartition(":")
    return host, port


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1", "[::1]") or host.startswith("127.")


@dataclass(frozen=True)
class KVEventsConfig:
    """vLLM's `--kv-events-config` keys, plus `block_size`, `hash_seed` and the privacy keys (see the
    module's docstring)."""

    enable_kv_cache_events: bool = False
    publisher: str = "zmq"
    endpoint: str = "tcp://127.0.0.1:5557"
    replay_endpoint: str | None = None
    topic: str = ""
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    block_size: int = DEFAULT_BLOCK_SIZE
    hash_seed: str = DEFAULT_HASH_SEED
    include_token_ids: bool = False
    keyed_hashes: bool = True  # False: vLLM's plain chain from hash_seed (see kv_events.py)
    allow_wildcard: bool = False
    bind: bool | None = None  # the publisher's endpoint; None: as it says (see the module's docstring)
    curve_secret_key_file: str | None = None
    curve_allowed_clients_dir: str | None = None

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
        for endpoint in (config.endpoint, config.replay_endpoint):
            host_port = _tcp_host_port(endpoint or "")
            if host_port and host_port[0] in WILDCARD_HOSTS and not config.allow_wildcard:
                raise ValueError(
                    f"kv_events_config: {endpoint} listens on every interface; name one (tcp://127.0.0.1:5557 "
                    'binds loopback) or add "allow_wildcard": true, and see "curve_secret_key_file"'
                )
        if bool(config.curve_secret_key_file) != bool(config.curve_allowed_clients_dir):
            raise ValueError("kv_events_config: curve_secret_key_file and curve_allowed_clients_dir go together")
        return config

    @classmethod
    def loopback(cls) -> KVEventsConfig:
        """`--enable-kv-events`: publish and replay on free loopback ports."""
        return cls(True, "zmq", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*")

    def binds(self, endpoint: str) -> bool:
        if self.bind is not None:
            return self.bind
        if endpoint.startswith(("ipc://", "inproc://")):
            return True
        host_port = _tcp_host_port(endpoint)
        if host_port is None:
            return False
        host, port = host_port
        return port == "*" or host in WILDCARD_HOSTS or _is_loopback(host)


class ZmqEventPublisher:
    """XPUB socket plus a ROUTER replay socket, served by one thread; batches are buffered for replay."""

    def __init__(self, config: KVEventsConfig, data_parallel_rank: int = 0) -> None:
        import zmq

        self._zmq = zmq
        self._ctx = zmq.Context()
        self._auth: Any = None
        self.curve_server_key: str | None = None
        self._pub = self._ctx.socket(zmq.XPUB)
        self._pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription reaches the thread, repeats too
        self._pub.set_hwm(config.hwm)
        self._replay = self._ctx.socket(zmq.ROUTER) if config.replay_endpoint else None
        if config.curve_secret_key_file:
            self._curve(config)
        self.binds = config.binds(config.endpoint)
        self._monitor = None
        if not self.binds:
            self._monitor = self._pub.get_monitor_socket()
        self.endpoint = self._open(self._pub, config.endpoint, self.binds)
        self.replay_endpoint: str | None = None
        if self._replay is not None and config.replay_endpoint:
            self.replay_endpoint = self._open(self._replay, config.replay_endpoint, True)  # a server: always binds
        self.topic = config.topic
        self._topic = config.topic.encode()
        self._rank = data_parallel_rank
        self._queue: queue.Queue[EventBatch | None] = queue.Queue(maxsize=config.max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        # Connect mode: batches published while no subscription has arrived, sent when one does.
        self._held: deque[tuple[int, bytes]] = deque()
        self._max_held = config.buffer_steps
        self.is_subscribed = self.binds  # a bound socket's late subscribers replay what they missed
        self._encoder = msgspec.msgpack.Encoder()
        self.next_seq = 0
        self.num_dropped = 0
        self.num_subscriptions = 0
        self._thread = threading.Thread(target=self._run, name="radixgate-kv-events", daemon=True)
        self._thread.start()

    def _curve(self, config: KVEventsConfig) -> None:
        from zmq.auth import load_certificate
        from zmq.auth.thread import ThreadAuthenticator

        assert config.curve_secret_key_file is not None
        public, secret = load_certificate(config.curve_secret_key_file)
        if secret is None:
            raise ValueError(
                f"kv_events_config: {config.curve_secret_key_file} holds no secret key "
                "(the .key_secret file that zmq.auth.create_certificates writes)"
            )
        self._auth = ThreadAuthenticator(self._ctx)
        self._auth.start()
        self._auth.configure_curve(domain="*", location=config.curve_allowed_clients_dir)
        for sock in (self._pub, self._replay):
            if sock is not None:
                sock.curve_secretkey, sock.curve_publickey, sock.curve_server = secret, public, True
        self.curve_server_key = public.decode()

    def _open(self, sock: Any, endpoint: str, binds: bool) -> str:
        """Binds (a `*` port picks a free one) or connects; returns the address subscribers use."""
        if not binds:
            sock.connect(endpoint)
            return endpoint
        host, _, port = endpoint.rpartition(":")
        if port == "*" and host.startswith("tcp://") and host != "tcp://*":
            return f"{host}:{sock.bind_to_random_port(host)}"
        sock.bind(endpoint)
        return str(sock.getsockopt_string(self._zmq.LAST_ENDPOINT))

    def publish(self, events: list[KVCacheEvent]) -> None:
        """Called on the engine loop: never blocks (a full queue drops the batch, counted)."""
        try:
            self._queue.put_nowait(EventBatch(time.time(), events, self._rank))
        except queue.Full:
            self.num_dropped += 1

    def _run(self) -> None:
        while True:
            self._serve_sockets()
            try:
                batch = self._queue.get(timeout=0.02)
            except queue.Empty:
                continue
            if batch is None:
                return
            payload = self._encoder.encode(batch)
            seq = self.next_seq
            self._buffer.append((seq, payload))
            self.next_seq = seq + 1
            if self.is_subscribed:
                self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
                continue
            if len(self._held) >= self._max_held:
                self._held.popleft()
                self.num_dropped += 1
            self._held.append((seq, payload))

    def _serve_sockets(self) -> None:
        """Connection events first (a disconnection precedes the next connection's subscription),
        then subscriptions, then replay requests."""
        zmq = self._zmq
        while self._monitor is not None and self._monitor.poll(0):
            from zmq.utils.monitor import recv_monitor_message

            event = recv_monitor_message(self._monitor)["event"]
            if event == zmq.EVENT_DISCONNECTED and self.is_subscribed:
                self.is_subscribed = False
                log.warning("KV events: lost the subscriber at %s; holding batches until it subscribes", self.endpoint)
            elif event in (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL):
                log.warning("KV events: the handshake with %s failed (CURVE keys?)", self.endpoint)
        while self._pub.poll(0):
            frame = self._pub.recv()
            if frame[:1] == b"\x01":
                self._subscribed()
        while self._replay is not None and self._replay.poll(0):
            self._serve_replay()

    def _subscribed(self) -> None:
        self.num_subscriptions += 1
        if self.is_subscribed:
            return
        self.is_subscribed = True
        log.info("KV events: subscribed at %s; sending %d held batches", self.endpoint, len(self._held))
        while self._held:
            seq, payload = self._held.popleft()
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))

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
        if self._monitor is not None:
            self._pub.disable_monitor()
            self._monitor.close(linger=0)
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        if self._auth is not None:
            self._auth.stop()
        self._ctx.term()
