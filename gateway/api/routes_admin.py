"""The control plane of a routing gateway: `GET /workers`, `POST /workers`, `DELETE /workers/{id}`.

With keys configured only an admin key reaches these (the middleware checks). A gateway with a
single co-located engine has no pool and answers 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from ..state import state_of
from ..workers.pool import WorkerPool
from .errors import APIError
from .sse import ERRORS

router = APIRouter()


class AddWorkerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(description="http://HOST:PORT (radixgate), openai+http://... or vllm+http://...")


def _pool(request: Request) -> WorkerPool:
    worker = state_of(request).worker
    if not isinstance(worker, WorkerPool):
        raise APIError(404, "this gateway serves its co-located engine; start it with --worker URL to route")
    return worker


@router.get("/workers", responses=ERRORS)
async def list_workers(request: Request) -> dict[str, Any]:
    """Every worker with its health, load and the hit rate its responses reported."""
    pool = _pool(request)
    return {"policy": pool.router.policy, "workers": [m.snapshot() for m in pool.members.values()]}


@router.post("/workers", status_code=201, responses=ERRORS)
async def add_worker(body: AddWorkerRequest, request: Request) -> dict[str, Any]:
    """Add a worker; it takes requests once its first health check (run now) passes."""
    pool = _pool(request)
    try:
        member = pool.add_remote(body.url)
    except ValueError as exc:
        raise APIError(400, str(exc), param="url") from None
    await pool.check_member(member)
    return member.snapshot()


@router.delete("/workers/{worker_id}", responses=ERRORS)
async def remove_worker(worker_id: str, request: Request) -> dict[str, Any]:
    """Drain a worker: no new requests; it leaves the pool when its running requests end."""
    pool = _pool(request)
    try:
        member = pool.drain(worker_id)
    except KeyError:
        raise APIError(404, f"no worker '{worker_id}'; GET /workers lists them", code="worker_not_found") from None
    return {**member.snapshot(), "removed": worker_id not in pool.members}
