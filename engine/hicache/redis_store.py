"""The Redis backend of HiCache's remote tier (`radixgate[redis]`, redis-py).

The password, when Redis asks for one, comes from `RADIXGATE_REDIS_PASSWORD_FILE` or
`RADIXGATE_REDIS_PASSWORD` (`storage_backend.redis_password`), never from the URL on a command line.
Keys are `key_prefix + block key`; a value is written with `SET` (with `EX ttl_s` when a TTL is
given) and read with `MGET`. Which blocks Redis keeps is Redis's policy (`maxmemory` and
`maxmemory-policy allkeys-lru`, or the TTL): a block it dropped is a miss.

Calls carry `timeout_s` on the socket and are never retried by redis-py: a refused, reset or
timed-out call raises `StoreUnavailable` and opens an outage of `retry_interval_s` during which
calls fail at once; the start of each outage is logged. The connection pool reconnects on the first
call after it.
"""

from __future__ import annotations

import logging
import threading
import time

from .storage_backend import StoreUnavailable

logger = logging.getLogger(__name__)

_MGET_BATCH = 16  # values per MGET, so a long prefix of large blocks is not one huge reply


class RedisStore:
    name = "redis"

    def __init__(
        self,
        url: str,
        key_prefix: str,
        ttl_s: float,
        timeout_s: float,
        retry_interval_s: float,
        password: str | None = None,
    ):
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as e:
            raise ImportError("the redis HiCache backend needs redis-py: pip install 'radixgate[redis]'") from e
        self._errors = (redis.ConnectionError, redis.TimeoutError, OSError)
        self._redis_error = redis.RedisError
        self._client = redis.Redis.from_url(
            url,
            password=password,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self.url = url
        self.key_prefix = key_prefix
        self.ttl_ms = int(ttl_s * 1000)
        self.retry_interval_s = retry_interval_s
        self.generation = 0
        self.num_errors = 0  # failed calls (each opens or extends an outage)
        self._down_until = 0.0
        self._lock = threading.Lock()

    @property
    def is_up(self) -> bool:
        return time.monotonic() >= self._down_until

    def _call(self, fn):
        if not self.is_up:
            raise StoreUnavailable(f"{self.url}: down, retrying after {self.retry_interval_s}s")
        try:
            return fn()
        except self._errors as e:
            with self._lock:
                starts = self.is_up
                if starts:
                    self.generation += 1
                self.num_errors += 1
                self._down_until = time.monotonic() + self.retry_interval_s
            if starts:
                logger.warning(
                    "HiCache remote tier: Redis at %s is down (%s: %s); outage %d, skipping it for %.1fs",
                    self.url,
                    type(e).__name__,
                    e,
                    self.generation,
                    self.retry_interval_s,
                )
            raise StoreUnavailable(f"{self.url}: {type(e).__name__}: {e}") from e
        except self._redis_error as e:  # answered with an error (e.g. OOM under noeviction): no outage
            self.num_errors += 1
            raise StoreUnavailable(f"{self.url}: {type(e).__name__}: {e}") from e

    def ping(self) -> bool:
        try:
            return bool(self._call(self._client.ping))
        except StoreUnavailable:
            return False

    def exists(self, keys: list[str]) -> list[bool]:
        def run() -> list[bool]:
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.exists(self.key_prefix + key)
            return [bool(n) for n in pipe.execute()]

        return self._call(run) if keys else []

    def get(self, keys: list[str]) -> list[bytes | None]:
        def run() -> list[bytes | None]:
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(keys), _MGET_BATCH):
                pipe.mget([self.key_prefix + k for k in keys[start : start + _MGET_BATCH]])
            return [value for batch in pipe.execute() for value in batch]

        return self._call(run) if keys else []

    def set(self, items: list[tuple[str, bytes]]) -> None:
        def run() -> None:
            pipe = self._client.pipeline(transaction=False)
            for key, value in items:
                pipe.set(self.key_prefix + key, value, px=self.ttl_ms or None)
            pipe.execute()

        if items:
            self._call(run)

    def close(self) -> None:
        try:
            self._client.close()
        except self._redis_error:
            pass
