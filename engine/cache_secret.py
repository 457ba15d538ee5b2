"""The deployment's cache secret: the key that keeps what the cache tiers and the KV events name
unguessable outside the deployment. Torch-free (the gateway's KV index imports it).

Everything derived from it is an HMAC-SHA256 keyed by it, one purpose string each:

| purpose                 | what it keys                                                          |
|-------------------------|-----------------------------------------------------------------------|
| `hicache block keys`    | the disk and remote tier's block keys (a guessed prompt's key cannot be computed) |
| `hicache value mac`     | the tag closing every disk file and remote value (a forged value is a miss) |
| `kv events hash seed`   | the hash seed of the KV events' block hashes (`events_hash_seed`)     |
| `kv events salt`        | a tenant's cache salt as it enters the first block's extra keys (`events_salt`) |
| `disaggregation channel` | the prefill/decode KV channel's HMAC key when no worker key is set (`disagg/`) |

Where it comes from, first found: the file named by `RADIXGATE_CACHE_SECRET_FILE` (what
`radixgate serve --cache-secret-file` sets), the value of `RADIXGATE_CACHE_SECRET`, or else 32
random bytes drawn once per process (`is_configured` False). Never a command-line argument: argv is
readable by every user of the machine. Workers that share a remote store, a disk folder across
restarts, or KV events read by another process need the same configured secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

SECRET_ENV = "RADIXGATE_CACHE_SECRET"
SECRET_FILE_ENV = "RADIXGATE_CACHE_SECRET_FILE"
_PROCESS_SECRET = secrets.token_bytes(32)  # the unconfigured default: agrees only within this process


@dataclass(frozen=True)
class CacheSecret:
    key: bytes = field(repr=False)
    is_configured: bool  # False: the random per-process default

    def derive(self, purpose: str) -> bytes:
        """A 32-byte key for one purpose (see the module's table)."""
        return hmac.new(self.key, purpose.encode(), hashlib.sha256).digest()

    def events_hash_seed(self, hash_seed: str) -> str:
        """The hash seed the KV events' block hashes are computed with, in place of the configured
        `hash_seed`: a vLLM-format consumer (llm-d's indexer) configured with this string computes
        the same hashes for requests without a cache salt."""
        return hmac.new(self.derive("kv events hash seed"), hash_seed.encode(), hashlib.sha256).hexdigest()

    def events_salt(self, cache_salt: str) -> str:
        """A tenant's cache salt as it enters the KV events' first-block extra keys."""
        return hmac.new(self.derive("kv events salt"), cache_salt.encode(), hashlib.sha256).hexdigest()


def load_cache_secret() -> CacheSecret:
    """The deployment's secret from the environment (see the module's docstring)."""
    from .config import _env  # config imports the KV events, which import this module

    path = _env("CACHE_SECRET_FILE")
    if path:
        try:
            with open(path, "rb") as f:
                key = f.read().strip()
        except OSError as e:
            raise ValueError(f"{SECRET_FILE_ENV}={path}: cannot read the cache secret: {e.strerror}") from None
        if len(key) < 16:
            raise ValueError(f"{SECRET_FILE_ENV}={path}: the cache secret must be at least 16 bytes")
        return CacheSecret(key, True)
    value = _env("CACHE_SECRET")
    if value:
        if len(value) < 16:
            raise ValueError(f"{SECRET_ENV}: the cache secret must be at least 16 characters")
        return CacheSecret(value.encode(), True)
    return CacheSecret(_PROCESS_SECRET, False)
