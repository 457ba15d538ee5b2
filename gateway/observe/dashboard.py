"""`/dashboard`: one self-contained page (no CDN), and `/dashboard/data`, everything it shows.

The data is scoped by the caller's key: an admin key (or a keyless server) gets the whole server's
cards, history and templates; a tenant key gets its own tenant's hit rate, history and templates,
beside the server-wide numbers SGLang's `/server_info` gives everyone (token usage, queue
lengths, capacity). Everything is drawn on <canvas> by inline JavaScript, so the page works on a
machine with no route to the internet.
"""

from __future__ import annotations

import time
from functools import lru_cache
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ..state import state_of
from ..tenancy.auth import WORKER_ROLE

router = APIRouter()


@lru_cache(maxsize=1)
def dashboard_html() -> str:
    return resources.files("radixgate.gateway.observe").joinpath("static/dashboard.html").read_text(encoding="utf-8")


@router.get("/dashboard", response_class=HTMLResponse)
async def dashboard() -> HTMLResponse:
    """The live dashboard page."""
    return HTMLResponse(dashboard_html())


SERVER_CARDS = ("token_usage", "num_running_reqs", "num_waiting_reqs", "max_total_num_tokens", "page_size")
ADMIN_CARDS = ("kv_cache_dtype", "prefix_cache_hits_by_tier")


@router.get("/dashboard/data")
async def dashboard_data(request: Request) -> dict[str, Any]:
    """The page's cards, per-second history (hit rate, token usage, TTFT p50/p99, tokens per second)
    and template rows: the whole server's for an admin, the caller's own tenant's for a tenant key."""
    state = state_of(request)
    stats = state.stats()
    is_admin = getattr(request.state, "role", "admin") in ("admin", WORKER_ROLE)
    tenant = None if is_admin else str(request.state.tenant)
    templates = state.prompt_stats.snapshot(tenant)["templates"]
    cards: dict[str, Any] = {k: stats.get(k) for k in SERVER_CARDS}
    if is_admin:
        cards |= {k: stats.get(k) for k in ADMIN_CARDS} | {"cache_hit_rate": stats.get("cache_hit_rate")}
    else:  # the tenant's own hit rate, from its own rows: never another tenant's traffic
        prompt, cached = sum(r["prompt_tokens"] for r in templates), sum(r["cached_tokens"] for r in templates)
        cards["cache_hit_rate"] = cached / prompt if prompt else None
    return {
        "now": time.time(),
        "model": state.model_name,
        "window_s": state.history.window_s,
        "scope": {"role": "admin" if is_admin else "tenant", "tenant": tenant},
        "cards": cards,
        "points": state.history.points(tenant),
        "templates": templates,
    }
