"""radixgate's engine: paged KV pool, radix prefix cache, cache-aware continuous batching.

Names are loaded on first use (PEP 562): `radixgate.engine.protocol` (what crosses the boundary to the
gateway) imports without torch; `Engine` brings the model code and torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import EngineConfig
    from .engine import Engine
    from .protocol import EngineStats, GenerateOutput, GenerateRequest, SamplingParams, StreamDelta

_WHERE = {
    "Engine": ".engine",
    "EngineConfig": ".config",
    "SamplingParams": ".protocol",
    "GenerateRequest": ".protocol",
    "GenerateOutput": ".protocol",
    "StreamDelta": ".protocol",
    "EngineStats": ".protocol",
}
__all__ = [
    "Engine",
    "EngineConfig",
    "EngineStats",
    "GenerateOutput",
    "GenerateRequest",
    "SamplingParams",
    "StreamDelta",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
