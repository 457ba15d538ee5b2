"""One real engine (the tiny model) for the whole gateway suite, and apps built around it.

Every test must leave the engine idle with no page leaked; the autouse fixture checks that.
Tests use prompts of their own so the shared prefix cache never links two tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.worker import LocalWorker

MODEL = "tiny"


@pytest.fixture(scope="session")
def worker() -> Iterator[LocalWorker]:
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(model_path=MODEL, max_total_tokens=32768))
    yield LocalWorker(engine)
    engine.shutdown()


@pytest.fixture(autouse=True)
def _engine_ends_idle(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "worker" in request.fixturenames:
        request.getfixturevalue("worker").check_idle_invariant()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def make_client(worker: LocalWorker, spans: InMemorySpanExporter) -> Iterator[Callable[..., TestClient]]:
    """`make_client(**GatewayConfig fields)` -> a TestClient on a fresh app over the shared engine."""
    clients: list[TestClient] = []

    def make(**config: Any) -> TestClient:
        client = TestClient(create_app(GatewayConfig(**config), worker=worker, span_exporter=spans))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


@pytest.fixture
def long_prefix() -> Callable[..., str]:
    """`long_prefix(tag)`: a prompt prefix of roughly 12 tokens per sentence, unique to `tag`."""

    def make(tag: str, sentences: int = 60) -> str:
        return " ".join(f"[{tag}] Sentence {i} of the shared instructions stays the same." for i in range(sentences))

    return make


@pytest.fixture(scope="session")
def paged_worker() -> Iterator[LocalWorker]:
    """A second tiny engine: 16-token pages and a small pool (cache diagnostics' below_page and evicted)."""
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(model_path=MODEL, page_size=16, max_total_tokens=2048))
    yield LocalWorker(engine)
    engine.shutdown()
