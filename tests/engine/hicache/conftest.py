"""A real redis-server per test for the remote tier: on a free loopback port, no persistence, killed
afterwards. Missing redis-server or redis-py skips these tests locally and fails them on CI."""

from __future__ import annotations

import os

import pytest


def _missing(what: str) -> None:
    message = f"{what} is not installed (make redis / pip install 'radixgate[redis]')"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}: on CI the remote-tier tests must run")
    pytest.skip(message)


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
