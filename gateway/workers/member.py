"""One worker of a `WorkerPool` as the gateway sees it: health, load, counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .router import BLOCK_TOKENS, Candidate


@dataclass
class Member:
    """One worker in the pool and what the gateway measured of it."""

    worker_id: str
    url: str
    kind: str  # "local" | "radixgate" | "openai" | "vllm"
    backend: Any  # LocalWorker | RadixgateWorker | OpenAIWorker
    candidate: Candidate
    is_healthy: bool = False
    is_draining: bool = False
    consecutive_failures: int = 0
    last_error: str | None = None
    engine_stats: dict[str, Any] = field(default_factory=dict)
    num_requests: int = 0
    num_failed: int = 0
    num_retried_away: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    predicted_tokens: int = 0
    best_tokens: int = 0
    num_mispredicted: int = 0
    num_exact_routes: int = 0

    @property
    def supports_salt(self) -> bool:
        return self.kind == "local" or bool(self.backend.supports_salt)

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.worker_id,
            "url": self.url,
            "kind": self.kind,
            "healthy": self.is_healthy,
            "draining": self.is_draining,
            "in_flight": self.candidate.num_requests,
            "in_flight_tokens": self.candidate.num_tokens,
            "requests": self.num_requests,
            "failed": self.num_failed,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_hit_rate": self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0,
            "predicted_tokens": self.predicted_tokens,
            "best_tokens": self.best_tokens,
            "mispredicted": self.num_mispredicted,
            "exact_routes": self.num_exact_routes,
            "kv_index_synced": bool(self.candidate.exact is not None and self.candidate.exact.is_synced),
            "kv_index_blocks": self.candidate.exact.num_blocks() if self.candidate.exact is not None else None,
            "indexed_tokens": len(self.candidate.index) * BLOCK_TOKENS,
            "max_total_num_tokens": self.engine_stats.get("max_total_num_tokens"),
            "last_error": self.last_error,
        }
