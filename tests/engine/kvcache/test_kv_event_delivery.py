"""The KV-event sockets alone: every batch delivered and replayed whether the publisher binds or
connects (a subscriber that binds, as llm-d's endpoint picker does), also right after the connection
starts and after the subscriber restarts; endpoints bind loopback unless told otherwise; with CURVE
only an allowed key pair hears anything. No sleeps: each wait polls against a generous deadline."""

from __future__ import annotations

import time

import msgpack
import pytest
import zmq
import zmq.auth

from radixgate.engine.kvcache.event_publisher import KVEventsConfig, ZmqEventPublisher
from radixgate.engine.protocol import END_SEQ, AllBlocksCleared

DEADLINE_S = 10.0


def until(predicate, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(0.005)


def receive(sub: zmq.Socket, n: int, timeout_s: float = DEADLINE_S) -> list[int]:
    """The sequence numbers of the next `n` batches (fewer if the deadline passes)."""
    seqs: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(seqs) < n and time.monotonic() < deadline:
        if sub.poll(50):
            _, seq, payload = sub.recv_multipart()
            assert msgpack.unpackb(payload)["events"] == [{"type": "AllBlocksCleared"}]
            seqs.append(int.from_bytes(seq, "big"))
    return seqs


def replay(ctx: zmq.Context, endpoint: str, start: int, keys=None, timeout_ms: int = 5000) -> list[int] | None:
    """The sequence numbers the replay socket sends from `start`; None when it does not answer."""
    dealer = ctx.socket(zmq.DEALER)
    if keys:
        dealer.curve_serverkey, dealer.curve_publickey, dealer.curve_secretkey = keys
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    seqs: list[int] = []
    try:
        while dealer.poll(timeout_ms):
            _, seq, _ = dealer.recv_multipart()
            if seq == END_SEQ:
                return seqs
            seqs.append(int.from_bytes(seq, "big"))
        return None
    finally:
        dealer.close(linger=0)


def sub_socket(ctx: zmq.Context, keys=None) -> zmq.Socket:
    sub = ctx.socket(zmq.SUB)
    if keys:
        sub.curve_serverkey, sub.curve_publickey, sub.curve_secretkey = keys
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    return sub


@pytest.fixture
def ctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.mark.parametrize("mode", ["bind", "connect"])
def test_every_batch_is_delivered_and_replayed(ctx, mode):
    for _ in range(4):  # the connect-mode loss was a race at connection start: try it several times
        sub = sub_socket(ctx)
        if mode == "connect":  # the subscriber binds, the publisher connects to it
            port = sub.bind_to_random_port("tcp://127.0.0.1")
            endpoint = f"tcp://127.0.0.1:{port}"
            config = KVEventsConfig(True, endpoint=endpoint, replay_endpoint="tcp://127.0.0.1:*", bind=False)
        else:
            config = KVEventsConfig.loopback()
        pub = ZmqEventPublisher(config)
        try:
            assert pub.binds == (mode == "bind")
            if mode == "bind":
                sub.connect(pub.endpoint)
                until(lambda pub=pub: pub.num_subscriptions >= 1)  # the publisher heard the subscription
            for _ in range(3):
                pub.publish([AllBlocksCleared()])  # at once: in connect mode, before the connection is up
            assert receive(sub, 3) == [0, 1, 2]
            assert pub.replay_endpoint is not None and replay(ctx, pub.replay_endpoint, 1) == [1, 2]
        finally:
            pub.close()
            sub.close(linger=0)


def test_a_connecting_publisher_holds_batches_while_its_subscriber_restarts(ctx):
    sub = sub_socket(ctx)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    pub = ZmqEventPublisher(KVEventsConfig(True, endpoint=f"tcp://127.0.0.1:{port}", bind=False))
    try:
        pub.publish([AllBlocksCleared()])
        assert receive(sub, 1) == [0]
        sub.close(linger=0)  # the subscriber goes away ...
        until(lambda: not pub.is_subscribed)
        pub.publish([AllBlocksCleared()])
        pub.publish([AllBlocksCleared()])
        sub = sub_socket(ctx)
        sub.bind(f"tcp://127.0.0.1:{port}")  # ... and comes back on its address
        assert receive(sub, 2) == [1, 2]
    finally:
        pub.close()
        sub.close(linger=0)


def test_endpoints_bind_loopback_unless_a_wildcard_is_allowed():
    assert KVEventsConfig().endpoint == "tcp://127.0.0.1:5557"
    assert KVEventsConfig().binds(KVEventsConfig().endpoint)
    assert not KVEventsConfig().binds("tcp://radixgate-epp:5557")  # another host: a subscriber that binds
    for endpoint in ("tcp://*:5557", "tcp://0.0.0.0:5557"):
        with pytest.raises(ValueError, match="allow_wildcard"):
            KVEventsConfig.from_json(f'{{"enable_kv_cache_events": true, "endpoint": "{endpoint}"}}')
    with pytest.raises(ValueError, match="allow_wildcard"):
        KVEventsConfig.from_json('{"enable_kv_cache_events": true, "replay_endpoint": "tcp://*:5558"}')
    allowed = KVEventsConfig.from_json('{"endpoint": "tcp://*:5557", "allow_wildcard": true}')
    assert allowed.binds(allowed.endpoint)


def test_with_curve_only_an_allowed_key_pair_hears_the_events(ctx, tmp_path):
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    for folder in (allowed, other):
        folder.mkdir()
    _, server_secret = zmq.auth.create_certificates(str(tmp_path), "server")
    zmq.auth.create_certificates(str(allowed), "gateway")
    zmq.auth.create_certificates(str(other), "intruder")
    server_key, _ = zmq.auth.load_certificate(server_secret)
    gateway = (server_key, *zmq.auth.load_certificate(str(allowed / "gateway.key_secret")))
    intruder = (server_key, *zmq.auth.load_certificate(str(other / "intruder.key_secret")))
    pub = ZmqEventPublisher(
        KVEventsConfig(
            True,
            endpoint="tcp://127.0.0.1:*",
            replay_endpoint="tcp://127.0.0.1:*",
            curve_secret_key_file=server_secret,
            curve_allowed_clients_dir=str(allowed),
        )
    )
    outsiders = [sub_socket(ctx), sub_socket(ctx, intruder)]  # no key at all; a key pair not allowed
    insider = sub_socket(ctx, gateway)
    try:
        assert pub.curve_server_key == server_key.decode()
        for sub in [*outsiders, insider]:
            sub.connect(pub.endpoint)
        until(lambda: pub.num_subscriptions >= 1)
        for _ in range(3):
            pub.publish([AllBlocksCleared()])
        assert receive(insider, 3) == [0, 1, 2]
        assert pub.num_subscriptions == 1, "only the allowed subscriber's subscription got through"
        assert [receive(sub, 1, timeout_s=0.5) for sub in outsiders] == [[], []]
        assert replay(ctx, pub.replay_endpoint, 0, gateway) == [0, 1, 2]
        assert replay(ctx, pub.replay_endpoint, 0, None, timeout_ms=500) is None
        assert replay(ctx, pub.replay_endpoint, 0, intruder, timeout_ms=500) is None
    finally:
        pub.close()
        for sub in [*outsiders, insider]:
            sub.close(linger=0)
