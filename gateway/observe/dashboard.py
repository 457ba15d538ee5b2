"""`/dashboard`: one self-contained page (no CDN), and `/dashboard/data`, the history it charts.

The page also polls `/server_info` and `/v1/prompt_stats`; everything is drawn on <canvas>
by inline JavaScript, so it works on a machine with no route to the internet.
"""

from __future__ import annotations

import time
from functools import lru_cache
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ..state import state_of

router = APIRouter()


@lru_cache(maxsize=1)
def dashboard_html() -> str:
    return resources.files("radixgate.gateway.observe").joinpath("static/dashboard.html").read_text(encoding="utf-8")


@router.get("/dashboard", response_class=HTMLResponse)
async def dashboard() -> HTMLResponse:
    """The live dashboard page."""
    return HTMLResponse(dashboard_html())


@router.get("/dashboard/data")
async def dashboard_data(request: Request) -> dict[str, Any]:
    """Per-second history: hit rate, token usage, TTFT p50/p99, prompt and output tokens per second."""
    state = state_of(request)
    state.stats()
    return {
        "now": time.time(),
        "model": state.model_name,
        "window_s": state.history.window_s,
        "points": state.history.points(),
    }
