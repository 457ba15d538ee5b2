"""radixgate.gateway: the OpenAI-compatible HTTP server in front of the co-located engine.

`create_app(GatewayConfig(...), worker=...)` builds the FastAPI app; `radixgate serve` runs it.
Imports are lazy so that `radixgate stats` starts without FastAPI or torch.
"""

from __future__ import annotations

from typing import Any

from radixgate import __version__

__all__ = ["GatewayConfig", "create_app", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "GatewayConfig":
        from .config import GatewayConfig

        return GatewayConfig
    raise AttributeError(name)
