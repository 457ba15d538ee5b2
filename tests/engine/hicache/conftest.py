"""A real redis-server per test for the remote tier: on a free loopback port, no persistence, killed
afterwards. Missing redis-server or redis-py skips these tests locally and fails them on CI. And
`forge`, what someone who can write a tier's store but lacks the cache secret can do to an entry."""

from __future__ import annotations

import hashlib
import struct

import pytest
import torch
from tooling import missing


def _missing(what: str) -> None:
    missing(what, "make redis" if what == "redis-server" else "pip install 'radixgate[redis]'")


@pytest.fixture(scope="module")
def redis_server():
    """One server for a test module (tests may stop and restart it; keep it running between them)."""
    from radixgate.bench.redis_server import RedisServer, redis_server_path

    if redis_server_path() is None:
        _missing("redis-server")
    try:
        import redis  # noqa: F401
    except ImportError:
        _missing("redis-py")
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


def _forge(entry: bytes, seed: int = 7) -> bytes:
    start = entry.index(b"{")  # magic, header length, then the JSON header
    (header_len,) = struct.unpack("<I", entry[start - 4 : start])
    head = entry[: start + header_len]
    g = torch.Generator().manual_seed(seed)
    payload = torch.randn((len(entry) - len(head) - 32) // 4, generator=g).numpy().tobytes()
    return head + payload + hashlib.sha256(entry[start : start + header_len] + payload).digest()


@pytest.fixture
def forge():
    """`forge(entry)`: the entry with random KV in place of its own and a SHA-256 checksum recomputed
    over the result (the header kept, so it still names the right key, fingerprint, dtype and shape)."""
    return _forge
