"""Building HiCache's tiers from the engine's config: the host pool, the disk tier and the remote
tier of one rank, and rank 0's tier controller over them; the cache secret that keys their blocks."""

from __future__ import annotations

import logging
import os
from urllib.parse import urlsplit

from ..cache_secret import SECRET_ENV, SECRET_FILE_ENV, load_cache_secret
from ..config import EngineConfig
from ..kvcache.kv_pool import KVPool
from .block_format import BlockFormat
from .disk_store import DiskStore
from .disk_tier import DiskTier
from .host_pool import HostPool
from .redis_store import RedisStore
from .remote_tier import RemoteTier
from .storage_backend import REDIS_PASSWORD_ENV, REDIS_PASSWORD_FILE_ENV, StorageBackend, redis_password
from .tier_controller import TierController

logger = logging.getLogger(__name__)

DISK_BLOCK_TOKENS = 64  # a multiple of every page size; 128 KiB files for the tiny model


def build_hicache(config: EngineConfig, pool: KVPool, model_path: str) -> TierController:
    """The host tier sized by `hicache_size` (GB) or `hicache_ratio` x the device pool, the disk
    tier in `hicache_storage_dir` (if given) with a `hicache_storage_size` GB budget, and the remote
    tier on `hicache_storage_backend` (if given). A store that does not answer at start is a
    warning, not an error: the engine serves, and the tier joins once the store answers."""
    host, disk_tier, remote_tier = build_tiers(config, pool, model_path)
    return TierController(pool, host, disk_tier, config.hicache_write_policy, remote_tier)


def build_tiers(
    config: EngineConfig, pool: KVPool, model_path: str, rank: int = 0
) -> tuple[HostPool, DiskTier | None, RemoteTier | None]:
    """One rank's host pool, disk tier and remote tier. Under tensor parallelism every rank builds
    its own for its own KV heads: a host pool of the same size (rank 0's host slots address every
    rank's), disk files in `<hicache_storage_dir>/tp<N>-rank<r>` with their own budget, its own
    connection to the remote store; the fingerprint naming the blocks carries tp_size and the rank."""
    ps, tp = config.page_size, (config.tp_size, rank)
    host_bytes_per_token = sum(b[0].numel() * b.element_size() for b in pool.k_buffers + pool.v_buffers)
    if config.hicache_size > 0:
        num_tokens = int(config.hicache_size * 1e9) // host_bytes_per_token
    else:
        num_tokens = int(config.hicache_ratio * pool.num_slots)
    host = HostPool(max(1, num_tokens // ps), ps, pool)
    disk_tier = remote_tier = None
    if config.hicache_storage_dir or config.hicache_storage_backend is not None:
        secret = load_cache_secret()
        block_format = BlockFormat(secret)
        if not secret.is_configured and rank == 0:
            logger.warning(
                "HiCache: no cache secret set (%s or %s): the disk tier's blocks are keyed by a random "
                "per-process secret, so they are not reused after a restart, and workers sharing the "
                "remote store never load each other's blocks",
                SECRET_FILE_ENV,
                SECRET_ENV,
            )
    if config.hicache_storage_dir:
        root = config.hicache_storage_dir
        if config.tp_size > 1:  # a TP=1 engine on the same directory indexes none of these files
            root = os.path.join(root, f"tp{config.tp_size}-rank{rank}")
        buf = pool.k_buffers[0]
        store = DiskStore(
            root,
            int(config.hicache_storage_size * 1e9),
            "",
            DISK_BLOCK_TOKENS,
            buf.dtype,
            tuple(buf.shape[1:]),
            pool.num_layers,
            block_format,
        )
        disk_tier = DiskTier(store, pool, host, model_path, tp)
    if config.hicache_storage_backend is not None:
        options = config.hicache_storage_backend_options
        backend = create_backend(config.hicache_storage_backend, options)
        if not backend.ping():
            logger.warning(
                "HiCache remote tier: %s store at %s does not answer; serving without it until it does",
                config.hicache_storage_backend,
                options["url"],
            )
        timeout_s = float(options["timeout_s"])  # type: ignore[arg-type]
        remote_tier = RemoteTier(backend, block_format, pool, host, model_path, DISK_BLOCK_TOKENS, timeout_s, tp)
    return host, disk_tier, remote_tier


def create_backend(name: str, options: dict[str, object]) -> StorageBackend:
    """The backend called `name` (one of config.HICACHE_STORAGE_BACKENDS) with its extra-config options."""
    if name == "redis":
        url = str(options["url"])
        if urlsplit(url).password:
            raise ValueError(
                f"hicache_storage_backend_extra_config: the url carries a password; set {REDIS_PASSWORD_FILE_ENV} "
                f"(a file holding it) or {REDIS_PASSWORD_ENV} instead (a command line is readable by every user)"
            )
        return RedisStore(
            url=url,
            password=redis_password(),
            key_prefix=str(options["key_prefix"]),
            ttl_s=float(options["ttl_s"]),  # type: ignore[arg-type]
            timeout_s=float(options["timeout_s"]),  # type: ignore[arg-type]
            retry_interval_s=float(options["retry_interval_s"]),  # type: ignore[arg-type]
        )
    raise ValueError(f"unknown HiCache storage backend {name!r}")
