"""Engine and sampling configuration. Field names follow SGLang's server arguments where one exists."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .kvcache.eviction import EVICTION_POLICIES
from .protocol import MAX_TOP_LOGPROBS, SamplingParams

if TYPE_CHECKING:
    from .kvcache.kv_events import KVEventsConfig

__all__ = ["MAX_TOP_LOGPROBS", "EngineConfig", "SamplingParams"]

SCHEDULE_POLICIES = ("lpm", "fcfs")
ATTENTION_BACKENDS = ("auto", "torch", "triton")
KV_CACHE_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2")
PAGE_SIZES = (1, 16, 64)
HICACHE_WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
HICACHE_STORAGE_BACKENDS = ("redis",)
# hicache_storage_backend_extra_config: key -> (type, default)
HICACHE_STORAGE_BACKEND_OPTIONS: dict[str, tuple[type, object]] = {
    "url": (str, "redis://127.0.0.1:6379/0"),
    "key_prefix": (str, "radixgate:kv:"),
    "ttl_s": (float, 0.0),  # 0: no expiry (the store's maxmemory policy decides)
    "timeout_s": (float, 0.5),  # per store call; a request waits at most this for a remote read
    "retry_interval_s": (float, 1.0),  # after a failed call, how long the store counts as down
}


def _env(name: str, default: str | None = None) -> str | None:
    """The one place engine code reads the environment: variables under the RADIXGATE_ prefix."""
    return os.environ.get(f"RADIXGATE_{name}", default)


def num_threads() -> int | None:
    """RADIXGATE_NUM_THREADS caps torch's CPU threads (tests set 1: servers and clients share 2 cores)."""
    value = _env("NUM_THREADS")
    return int(value) if value else None


def tp_timeout_s() -> float:
    """RADIXGATE_TP_TIMEOUT_S bounds each tensor-parallel collective (default 300: a first GPU step may
    compile kernels); a rank that stops answering fails the step after it instead of hanging it."""
    return float(_env("TP_TIMEOUT_S") or 300.0)


def default_model_cache_dir() -> str:
    return _env("CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "radixgate")


@dataclass(frozen=True)
class EngineConfig:
    model_path: str = "tiny"
    device: str = "cpu"
    dtype: str = "float32"
    page_size: int = 1
    max_total_tokens: int | None = None
    mem_fraction_static: float = 0.2
    kv_cache_dtype: str = "auto"
    schedule_policy: str = "lpm"
    chunked_prefill_size: int = 2048
    max_prefill_tokens: int = 8192
    max_running_requests: int = 128
    disable_radix_cache: bool = False
    # Which unlocked cached prefix leaves first when the pool is full (kvcache/eviction.py; SGLang's names).
    radix_eviction_policy: str = "lru"
    # Request priority (SGLang's --enable-priority-scheduling): the waiting queue is ordered by
    # priority, higher first (or lower first with schedule_low_priority_values_first, vLLM's order),
    # and a request gains one level per `priority_aging_steps` scheduler steps it waits, so none starves.
    # Off: a request with a priority other than 0 is refused.
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    priority_aging_steps: int = 32
    # TTL pins (kvcache/pins.py): at most this fraction of the pool is pinned; 0 turns pins off
    # (a pin asked for is then served unpinned, and the answer says so).
    max_pinned_ratio: float = 0.25
    # Tenant fair share (kvcache/tenant_share.py): eviction takes first from the tenants (cache
    # salts) above their share of the cache; a tenant counts while it sent a request within the window.
    # On by default (`--disable-tenant-cache-fairness` turns it off): with one tenant it evicts what
    # policy order evicts (`radixgate bench trace --simulate --tenant-cache-fairness on|off`).
    tenant_cache_fairness: bool = True
    tenant_active_window_s: float = 60.0
    attention_backend: str = "auto"
    random_seed: int = 0
    enable_hicache: bool = False
    hicache_ratio: float = 2.0
    hicache_size: float = 0.0
    hicache_storage_dir: str | None = None
    hicache_write_policy: str = "write_through"
    hicache_storage_size: float = 16.0  # GB of disk for the disk tier (LRU beyond it)
    # The remote tier below the disk, shared by every worker: "redis", and its options as JSON.
    hicache_storage_backend: str | None = None
    hicache_storage_backend_extra_config: str | None = None
    # KV events in vLLM's format (kvcache/kv_events.py): vLLM's --kv-events-config JSON, or
    # enable_kv_events for a publisher and replay socket on free loopback ports.
    kv_events_config: str | None = None
    enable_kv_events: bool = False
    # Requests arriving together whose uncached prefixes share at least this many tokens are
    # admitted one at a time so the shared part is computed once (SGLang's in-batch prefix caching).
    in_batch_prefix_threshold: int = 32
    # A prefill chunk and the running requests' decode tokens share one forward pass (SGLang's
    # --enable-mixed-chunk; on by default here, as in vLLM v1), so a long prompt arriving does not
    # stall the running streams (`radixgate bench mixed-chunk`).
    enable_mixed_chunk: bool = True
    # Tensor parallelism (SGLang's --tp-size): the model split over this many ranks (engine/distributed/).
    tp_size: int = 1
    # CUDA only (model/cuda_graph.py): decode steps of up to this many requests are captured as
    # CUDA graphs and replayed (SGLang's --cuda-graph-max-bs, --disable-cuda-graph). None: 64, or
    # max_running_requests when smaller. Needs the Triton attention backend (with the torch backend
    # decode runs eagerly); on CPU there is nothing to capture and setting a size is an error.
    # Engine.stats()["cuda_graph"] says whether it is on and why not.
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    # Decode step N+1 launched before step N's tokens are read back (scheduler/overlap.py; SGLang's
    # overlap scheduler). Off by default until measured on a GPU, where it hides the host's work.
    enable_overlap_schedule: bool = False

    def __post_init__(self) -> None:
        if self.page_size not in PAGE_SIZES:
            raise ValueError(f"page_size must be one of {PAGE_SIZES}, got {self.page_size}")
        if self.max_total_tokens is not None and self.max_total_tokens < self.page_size * 4:
            raise ValueError(
                f"max_total_tokens={self.max_total_tokens} is too small: give at least {self.page_size * 4} tokens"
            )
        if not 0.0 < self.mem_fraction_static < 1.0:
            raise ValueError(f"mem_fraction_static must be in (0, 1), got {self.mem_fraction_static}")
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(f"schedule_policy must be one of {SCHEDULE_POLICIES}, got {self.schedule_policy!r}")
        if self.radix_eviction_policy not in EVICTION_POLICIES:
            raise ValueError(
                f"radix_eviction_policy must be one of {EVICTION_POLICIES}, got {self.radix_eviction_policy!r}"
            )
        if not isinstance(self.priority_aging_steps, int) or self.priority_aging_steps < 1:
            raise ValueError(f"priority_aging_steps must be an integer >= 1, got {self.priority_aging_steps!r}")
        if not 0.0 <= self.max_pinned_ratio <= 1.0:
            raise ValueError(f"max_pinned_ratio must be in [0, 1] (0: no pins), got {self.max_pinned_ratio}")
        if self.tenant_active_window_s <= 0:
            raise ValueError(f"tenant_active_window_s must be > 0, got {self.tenant_active_window_s}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attention_backend must be one of {ATTENTION_BACKENDS}, got {self.attention_backend!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {self.kv_cache_dtype!r}")
        if self.dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be float32, float16 or bfloat16, got {self.dtype!r}")
        if self.chunked_prefill_size < self.page_size:
            raise ValueError(f"chunked_prefill_size must be at least page_size ({self.page_size})")
        if self.max_running_requests < 1:
            raise ValueError("max_running_requests must be at least 1")
        if self.cuda_graph_max_bs is not None and self.cuda_graph_max_bs < 1:
            raise ValueError(f"cuda_graph_max_bs must be at least 1, got {self.cuda_graph_max_bs}")
        if self.cuda_graph_max_bs is not None and not self.device.startswith("cuda"):
            raise ValueError(f"cuda_graph_max_bs needs a CUDA device (device is {self.device!r}): drop it")
        if self.cuda_graph_max_bs is not None and self.disable_cuda_graph:
            raise ValueError("cuda_graph_max_bs is set but disable_cuda_graph is on: drop one")
        if self.hicache_write_policy not in HICACHE_WRITE_POLICIES:
            raise ValueError(
                f"hicache_write_policy must be one of {HICACHE_WRITE_POLICIES}, got {self.hicache_write_policy!r}"
            )
        if self.hicache_ratio <= 0 or self.hicache_size < 0 or self.hicache_storage_size <= 0:
            raise ValueError(
                "hicache_ratio and hicache_storage_size must be > 0 and hicache_size >= 0 (GB; 0 "
                f"sizes the host tier by hicache_ratio), got {self.hicache_ratio}, "
                f"{self.hicache_storage_size}, {self.hicache_size}"
            )
        if self.kv_events_config is not None or self.enable_kv_events:
            if self.disable_radix_cache:
                raise ValueError("KV events describe the radix cache: drop disable_radix_cache to publish them")
            self.kv_events()  # a malformed config fails here, saying what to fix
        if not isinstance(self.tp_size, int) or self.tp_size < 1:
            raise ValueError(f"tp_size must be an integer >= 1, got {self.tp_size!r}")
        if self.enable_hicache and self.disable_radix_cache:
            raise ValueError("enable_hicache needs the radix cache: drop disable_radix_cache")
        if self.hicache_storage_dir is not None and not self.enable_hicache:
            raise ValueError("hicache_storage_dir is set but enable_hicache is off: enable HiCache to use it")
        if self.hicache_storage_backend is not None:
            if self.hicache_storage_backend not in HICACHE_STORAGE_BACKENDS:
                raise ValueError(
                    f"hicache_storage_backend must be one of {HICACHE_STORAGE_BACKENDS}, "
                    f"got {self.hicache_storage_backend!r}"
                )
            if not self.enable_hicache:
                raise ValueError("hicache_storage_backend is set but enable_hicache is off: enable HiCache to use it")
        self.hicache_storage_backend_options  # noqa: B018 (validates the JSON)

    @property
    def hicache_storage_backend_options(self) -> dict[str, object]:
        """`hicache_storage_backend_extra_config` parsed, checked and completed with defaults."""
        raw = self.hicache_storage_backend_extra_config
        try:
            given = json.loads(raw) if raw else {}
        except ValueError as e:
            raise ValueError(f"hicache_storage_backend_extra_config is not valid JSON: {e}") from None
        if not isinstance(given, dict):
            raise ValueError("hicache_storage_backend_extra_config must be a JSON object")
        unknown = sorted(set(given) - set(HICACHE_STORAGE_BACKEND_OPTIONS))
        if unknown:
            raise ValueError(
                f"hicache_storage_backend_extra_config: unknown keys {unknown}; "
                f"known: {sorted(HICACHE_STORAGE_BACKEND_OPTIONS)}"
            )
        options: dict[str, object] = {}
        for name, (kind, default) in HICACHE_STORAGE_BACKEND_OPTIONS.items():
            value = given.get(name, default)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind) or (kind is float and value < 0):  # type: ignore[operator]
                raise ValueError(f"hicache_storage_backend_extra_config: {name} must be a non-negative {kind.__name__}")
            options[name] = value
        if options["timeout_s"] == 0:
            raise ValueError("hicache_storage_backend_extra_config: timeout_s must be > 0")
        return options

    def kv_events(self) -> KVEventsConfig | None:
        """The KV-events settings, or None when events are off."""
        from .kvcache.kv_events import KVEventsConfig  # the publisher's module: loaded when events are asked for

        if self.kv_events_config is not None:
            config = KVEventsConfig.from_json(self.kv_events_config)
            return config if config.enable_kv_cache_events and config.publisher == "zmq" else None
        return KVEventsConfig.loopback() if self.enable_kv_events else None

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    @property
    def kv_torch_dtype(self):
        """The KV pool's storage dtype: the model dtype for "auto", else the FP8 format named."""
        from .kernels.fp8 import FP8_DTYPES

        return FP8_DTYPES.get(self.kv_cache_dtype, self.torch_dtype)
