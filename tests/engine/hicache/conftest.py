"""A real redis-server per test for the remote tier: on a free loopback port, no persistence, killed
afterwards. Missing redis-server or redis-py skips these tests locally and fails them on CI."""

from __future__ import annotations

import pytest
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
