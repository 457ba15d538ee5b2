"""The storage-backend interface of HiCache's remote tier: a block store below the disk tier that
every worker of one model can read and write (SGLang's HiCacheStorage: Mooncake, 3FS, NIXL, file;
here Redis).

A backend stores opaque values by key and promises nothing about keeping them: its own memory
policy (Redis's `maxmemory` with LRU, a TTL) may drop any block, and a restart may drop all of them.
What a value means (the KV of one block, checksummed, naming its key and model fingerprint) is the
remote tier's business (`remote_io.py`), not the backend's.

Every method is called on HiCache's background threads, never on the engine loop. A method either
answers within the backend's timeout or raises `StoreUnavailable`; after that the backend counts
as down (`is_up` False, calls fail at once without touching the network) until its retry interval
has passed, when the next call reconnects. `generation` grows at every outage, so a caller can drop
what it believed the store held (a restarted store comes back empty).
"""

from __future__ import annotations

from typing import Protocol


class StoreUnavailable(Exception):
    """The store did not answer (refused, reset, timed out) or is inside its retry interval."""


class StorageBackend(Protocol):
    name: str
    generation: int  # outages seen so far

    @property
    def is_up(self) -> bool:
        """False inside the retry interval after a failed call (no network needed to answer)."""
        ...

    def ping(self) -> bool:
        """Whether the store answers now; a failure starts an outage."""
        ...

    def exists(self, keys: list[str]) -> list[bool]:
        """Which keys are stored: one round trip for all of them."""
        ...

    def get(self, keys: list[str]) -> list[bytes | None]:
        """The values (None where absent), in as few round trips as the backend allows."""
        ...

    def set(self, items: list[tuple[str, bytes]]) -> None:
        """Stores the values, one round trip for all of them; the store may drop them later."""
        ...

    def close(self) -> None: ...


def create_backend(name: str, options: dict[str, object]) -> StorageBackend:
    """The backend called `name` (one of config.HICACHE_STORAGE_BACKENDS) with its extra-config options."""
    if name == "redis":
        from .redis_store import RedisStore

        return RedisStore(
            url=str(options["url"]),
            key_prefix=str(options["key_prefix"]),
            ttl_s=float(options["ttl_s"]),  # type: ignore[arg-type]
            timeout_s=float(options["timeout_s"]),  # type: ignore[arg-type]
            retry_interval_s=float(options["retry_interval_s"]),  # type: ignore[arg-type]
        )
    raise ValueError(f"unknown HiCache storage backend {name!r}")
