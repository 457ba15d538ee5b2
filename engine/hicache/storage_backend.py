"""The storage-backend interface of HiCache's remote tier: a block store below the disk tier that
every worker of one model can read and write (SGLang's HiCacheStorage: Mooncake, 3FS, NIXL, file;
here Redis).

A backend stores opaque values by key and promises nothing about keeping them: its own memory
policy (Redis's `maxmemory` with LRU, a TTL) may drop any block, and a restart may drop all of them.
What a value means (the KV of one block, checksummed, naming its key and model fingerprint) is the
remote tier's business (`remote_tier.py`), not the backend's.

Every method is called on HiCache's background threads, never on the engine loop. A method either
answers within the backend's timeout or raises `StoreUnavailable`; after that the backend counts
as down (`is_up` False, calls fail at once without touching the network) until its retry interval
has passed, when the next call reconnects. `generation` grows at every outage, so a caller can drop
what it believed the store held (a restarted store comes back empty).
"""

from __future__ import annotations

from typing import Protocol

from ..config import _env

REDIS_PASSWORD_ENV = "RADIXGATE_REDIS_PASSWORD"
REDIS_PASSWORD_FILE_ENV = "RADIXGATE_REDIS_PASSWORD_FILE"


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


def redis_password() -> str | None:
    """The Redis password: the file named by RADIXGATE_REDIS_PASSWORD_FILE, else RADIXGATE_REDIS_PASSWORD."""
    path = _env("REDIS_PASSWORD_FILE")
    if path:
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError as e:
            message = f"{REDIS_PASSWORD_FILE_ENV}={path}: cannot read the Redis password: {e.strerror}"
            raise ValueError(message) from None
    return _env("REDIS_PASSWORD") or None
