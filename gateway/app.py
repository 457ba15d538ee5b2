"""`create_app`: the FastAPI app and its one `AppState`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from opentelemetry.sdk.trace.export import SpanExporter

from radixgate import __version__

from .api.errors import install_error_handlers
from .api.middleware import AuthMiddleware, BodyLimitMiddleware
from .api.routes_admin import router as admin_router
from .api.routes_embeddings import router as embeddings_router
from .api.routes_native import router as native_router
from .api.routes_openai import router as openai_router
from .api.routes_tokenizer import router as tokenizer_router
from .api.wire.anthropic_errors import AnthropicErrorShape
from .api.wire.routes_messages import router as messages_router
from .api.wire.routes_responses import router as responses_router
from .config import GatewayConfig
from .diagnostics.store import DiagnosticsStore
from .observe.dashboard import router as dashboard_router
from .observe.metrics import Metrics
from .observe.prompt_stats import PromptStatsRecorder
from .observe.telemetry import TraceContextMiddleware, make_tracer
from .observe.timeseries import TimeSeries
from .state import AppState
from .tenancy.auth import Authenticator
from .tenancy.rate_limit import RateLimiter
from .tenancy.response_store import ResponseStore
from .workers.front import build_worker
from .workers.worker import Worker

HISTORY_SAMPLE_S = 1.0
DOCS_STATIC = "/docs/static"


def create_app(
    config: GatewayConfig, worker: Worker | None = None, span_exporter: SpanExporter | None = None
) -> FastAPI:
    """Build the gateway. Without `worker`, the app builds one from the config (the co-located
    engine from `config.engine`, or a pool over `config.workers` / `config.dp_size` engines) and
    closes it on exit; a worker passed in stays the caller's to close (tests share one)."""
    owns_worker = worker is None
    if worker is None:
        if config.engine is None and not config.workers:
            raise ValueError("create_app needs a worker, config.engine (an EngineConfig) or config.workers")
        built: Worker = build_worker(config)
        worker = built
    tracer, provider = make_tracer(span_exporter)
    holder: dict[str, AppState] = {}
    metrics = Metrics(
        config.served_model_name or worker.model_name,
        worker.stats,
        lambda: holder["state"].num_queued,
        config.max_template_labels,
    )
    state = AppState(
        config=config,
        worker=worker,
        # A router sends the worker key to its workers; only a worker accepts it.
        auth=Authenticator(config.api_keys, config.admin_api_keys, None if config.is_routed else config.worker_api_key),
        limiter=RateLimiter(config.rate_limit_rpm, config.rate_limit_tpm),
        metrics=metrics,
        tracer=tracer,
        tracer_provider=provider,
        prompt_stats=PromptStatsRecorder(
            config.max_tracked_templates, keep_excerpts=not config.disable_prompt_excerpts
        ),
        history=TimeSeries(config.dashboard_window_s),
        owns_worker=owns_worker,
        diagnostics=DiagnosticsStore(config.diagnostics_history_size),
    )
    holder["state"] = state

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        start, stop = getattr(state.worker, "start", None), getattr(state.worker, "stop", None)
        if start is not None:  # optional lifecycle hooks: a pool's health checks
            await start()
        sampler = asyncio.create_task(_sample_history(state))
        yield
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        if stop is not None:
            await stop()
        if state.tracer_provider is not None:
            state.tracer_provider.shutdown()
        if state.owns_worker:
            state.worker.close()

    # /docs and /redoc load Swagger UI and ReDoc from files the app serves (DOCS_STATIC), never a CDN.
    app = FastAPIOffline(
        static_url=DOCS_STATIC,
        title="radixgate",
        version=__version__,
        lifespan=lifespan,
        description="OpenAI-compatible gateway with a co-located, prefix-caching engine.",
    )
    app.state.gateway = state
    app.state.responses = ResponseStore(
        config.response_store_size, config.response_store_bytes, config.response_store_ttl_s
    )
    install_error_handlers(app)
    app.include_router(openai_router)
    app.include_router(messages_router)
    app.include_router(responses_router)
    app.include_router(native_router)
    app.include_router(tokenizer_router)
    app.include_router(embeddings_router)
    app.include_router(dashboard_router)
    app.include_router(admin_router)
    # Starlette runs the last-added middleware first: auth, then the size limit, then routing.
    app.add_middleware(BodyLimitMiddleware, max_bytes=config.max_request_bytes)
    app.add_middleware(
        AuthMiddleware, auth=state.auth, public_metrics=config.public_metrics, allowed_hosts=config.allowed_hosts
    )
    app.add_middleware(AnthropicErrorShape)  # /v1/messages errors in Anthropic's shape, auth's too
    app.add_middleware(TraceContextMiddleware)  # outermost: every route runs in the caller's trace
    return app


async def _sample_history(state: AppState) -> None:
    """Token usage and the running hit rate are levels, not events: sample them every second."""
    while True:
        state.stats()
        await asyncio.sleep(HISTORY_SAMPLE_S)


def app_state(app: Any) -> AppState:
    """The state object of an app built by `create_app` (for tests and tools)."""
    return app.state.gateway
