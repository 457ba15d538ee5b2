"""`AppState`: everything a running gateway holds, created once by `create_app`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from .api.errors import APIError
from .config import GatewayConfig
from .diagnostics.store import DiagnosticsStore
from .observe.metrics import Metrics
from .observe.prompt_stats import PromptStatsRecorder
from .observe.timeseries import TimeSeries
from .tenancy.auth import Authenticator, cache_salt_for
from .tenancy.rate_limit import RateLimiter
from .workers.worker import Worker

request_log = logging.getLogger("radixgate.gateway.requests")


def state_of(request: Request) -> AppState:
    return request.app.state.gateway


@dataclass
class AppState:
    config: GatewayConfig
    worker: Worker
    auth: Authenticator
    limiter: RateLimiter
    metrics: Metrics
    tracer: Tracer
    tracer_provider: TracerProvider | None
    prompt_stats: PromptStatsRecorder
    history: TimeSeries
    owns_worker: bool
    started_at: float = field(default_factory=time.time)
    # Admitted requests with no token yet; only touched on the event loop thread.
    num_queued: int = 0
    # Grammar compiles each tenant has running or queued (structured_output.py); guarded there.
    grammar_compiles: dict[str, int] = field(default_factory=dict)
    # Recent prompts and generated replies per tenant: cache_diagnostics and history keeping.
    diagnostics: DiagnosticsStore = field(default_factory=lambda: DiagnosticsStore(0))

    @property
    def model_name(self) -> str:
        return self.config.served_model_name or self.worker.model_name

    def cache_salt(self, tenant: str) -> str | None:
        return cache_salt_for(tenant, self.auth.enabled)

    def check_model(self, model: str) -> None:
        """OpenAI answers an unknown model with 404 `model_not_found`; so do we."""
        if model not in (self.model_name, self.worker.model_name):
            raise APIError(
                404,
                f"the model '{model}' does not exist; this server serves '{self.model_name}' (see /v1/models)",
                code="model_not_found",
                param="model",
            )

    def admit(self, tenant: str, prompt_tokens: int, endpoint: str) -> None:
        """Refuse before touching the engine: 503 when the queue is full, 429 over a tenant's rate."""
        limit = self.config.max_queued_requests
        if limit is not None and self.num_queued >= limit:
            self.metrics.rejections.labels("queue_full").inc()
            raise APIError(
                503,
                f"the server has {self.num_queued} requests waiting (limit {limit}); retry shortly",
                code="queue_full",
                headers={"Retry-After": "1"},
            )
        try:
            self.limiter.check_and_charge(tenant, prompt_tokens)
        except APIError:
            self.metrics.rejections.labels("rate_limit").inc()
            raise

    def stats(self) -> dict[str, Any]:
        stats = self.worker.stats()
        self.history.sample(stats)
        return stats

    def sample_usage(self) -> None:
        """The history's token usage and hit rate after a request: from the worker's `usage()` where it
        has one (a pool, whose full stats snapshot every worker), else from its stats."""
        usage = getattr(self.worker, "usage", None)
        self.history.sample(usage() if usage is not None else self.worker.stats())
