"""A real worker wrapped to record, by rid, the prompt ids each request reached the engine with and
the ids it generated: the diagnostics and history-keeping tests compare against these."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from radixgate.engine.protocol import GenerateRequest, StreamDelta
from radixgate.gateway.workers.worker import LocalWorker


class Recording:
    """The real engine's worker, recording each request's prompt ids and generated ids by rid."""

    def __init__(self, inner: LocalWorker) -> None:
        self.inner = inner
        self.prompts: dict[str, list[int]] = {}
        self.outputs: dict[str, list[int]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        self.prompts[request.rid] = list(request.input_ids)
        async with aclosing(self.inner.stream(request)) as deltas:
            async for delta in deltas:
                if delta.output is not None:
                    self.outputs[request.rid] = list(delta.output.token_ids)
                yield delta
