"""The control plane of a routing gateway: `GET /workers`, `POST /workers`, `DELETE /workers/{id}`.

With keys configured only an admin key reaches these (the middleware checks). A gateway with a
single co-located engine has no pool and answers 404.

`POST /workers` adds only a URL whose host `--worker-allowlist` names (a host name, an address or a
CIDR; loopback by default), and the gateway sends its worker key only to a worker that proved it
holds it: the gateway sends a fresh nonce to the worker's public `POST /worker_proof`, which answers
HMAC-SHA256(worker key, nonce); a listener without the key cannot answer, so it never sees the key.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

import httpx
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from ..state import state_of
from ..workers.pool import WorkerPool
from ..workers.remote import parse_worker_url
from .errors import APIError
from .sse import ERRORS

log = logging.getLogger("radixgate.gateway")
PROOF_CONTEXT = b"radixgate worker proof v1:"
PROOF_TIMEOUT_S = 5.0

router = APIRouter()


class ProofRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nonce: str = Field(min_length=32, max_length=128, pattern="^[0-9a-f]+$")


def worker_proof(worker_key: str, nonce: str) -> str:
    return hmac.new(worker_key.encode(), PROOF_CONTEXT + nonce.encode(), hashlib.sha256).hexdigest()


def is_allowed_host(host: str, allowlist: Collection[str]) -> bool:
    """`host` (a name or an address) is listed by name, or is an address inside a listed CIDR. Names
    are never resolved: a name that resolves into an allowed network is not thereby allowed."""
    host = host.lower().strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host in {entry.lower() for entry in allowlist}
    for entry in allowlist:
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue  # a name
    return False


async def check_holds_worker_key(base_url: str, worker_key: str) -> None:
    """A 400 unless the worker at `base_url` answers the challenge with the worker key's HMAC."""
    nonce = secrets.token_hex(32)
    try:
        async with httpx.AsyncClient(timeout=PROOF_TIMEOUT_S, follow_redirects=False) as client:
            response = await client.post(base_url + "/worker_proof", json={"nonce": nonce})
        proof = response.json().get("proof") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        log.warning("worker %s did not answer the key challenge: %s", base_url, exc)
        proof = None
    if not isinstance(proof, str) or not hmac.compare_digest(proof, worker_proof(worker_key, nonce)):
        raise APIError(
            400,
            "the worker did not prove it holds this gateway's worker key (POST /worker_proof); start it with "
            "the same --worker-api-key-file",
            param="url",
            code="worker_key_unproven",
        )


@router.post("/worker_proof", responses=ERRORS)
async def prove_worker_key(body: ProofRequest, request: Request) -> dict[str, str]:
    """Public: HMAC-SHA256(worker key, nonce), so a gateway can check this worker holds its key
    before sending it. The key itself never leaves; a server without one answers 404."""
    config = state_of(request).config
    if not config.worker_api_key or config.is_routed:
        raise APIError(404, "this server takes no worker key", code="not_found")
    return {"proof": worker_proof(config.worker_api_key, body.nonce)}


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
    config = state_of(request).config
    try:
        kind, base_url = parse_worker_url(body.url)
    except ValueError as exc:
        raise APIError(400, str(exc), param="url") from None
    host = urlsplit(base_url).hostname or ""
    if not is_allowed_host(host, config.worker_allowlist):
        raise APIError(
            403,
            f"'{host}' is not in this gateway's --worker-allowlist ({', '.join(config.worker_allowlist)}); "
            "restart it with the host or its network listed",
            param="url",
            code="worker_not_allowed",
        )
    if config.worker_api_key:
        if kind != "radixgate":
            raise APIError(
                400,
                "a foreign worker cannot prove it holds the worker key, so it is not sent one at runtime; list it "
                "with --worker at startup",
                param="url",
                code="worker_key_unproven",
            )
        await check_holds_worker_key(base_url, config.worker_api_key)
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
