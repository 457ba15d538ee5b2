"""SGLang's PD fields on a request (`bootstrap_host`, `bootstrap_port`, `bootstrap_room`): honoured
only by a `--disaggregation-mode` worker, only from its router (over the worker channel, or on a
worker without HTTP keys, as sglang-router, which sends workers no credentials, needs it), and on a
decode worker only for a registered prefill bootstrap address, so no client can make a worker
connect anywhere. A tenant's key, or anything else, is a 400 naming the field."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import Request

from radixgate.engine.protocol import Bootstrap

from ..generation import Job
from ..state import state_of
from ..tenancy.auth import WORKER_ROLE
from .errors import APIError

FIELDS = ("bootstrap_host", "bootstrap_port", "bootstrap_room")


def _bad(field: str, message: str) -> APIError:
    return APIError(400, f"'{field}': {message}", param=field, code="invalid_value")


def bootstrap_of(request: Request, body: Any, num_jobs: int) -> Bootstrap | None:
    """The request's bootstrap (read off the pydantic body, where they are extra fields), checked;
    None when it names none."""
    given = {f: getattr(body, f, None) for f in FIELDS if getattr(body, f, None) is not None}
    if not given:
        return None
    field = next(iter(given))
    state = state_of(request)
    refuses = getattr(state.worker, "refuses_bootstrap", None)
    if refuses is None:
        raise _bad(field, "this server runs no --disaggregation-mode prefill|decode: drop the bootstrap fields")
    config = state.config
    is_keyless = not (config.api_keys or config.admin_api_keys or config.worker_api_key)
    if getattr(request.state, "role", None) != WORKER_ROLE and not is_keyless:
        raise _bad(field, "bootstrap fields are taken only from a router holding the worker key")
    missing = [f for f in FIELDS if f not in given]
    if missing:
        raise _bad(missing[0], "give bootstrap_host, bootstrap_port and bootstrap_room together")
    host, port, room = given["bootstrap_host"], given["bootstrap_port"], given["bootstrap_room"]
    if not isinstance(host, str) or not host:
        raise _bad("bootstrap_host", "must be a host name or address")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise _bad("bootstrap_port", "must be a port number")
    if not isinstance(room, int) or isinstance(room, bool) or room < 0:
        raise _bad("bootstrap_room", "must be a non-negative integer (one room per request)")
    if num_jobs != 1:
        raise _bad("bootstrap_room", "one bootstrap room pairs one generation: send one prompt with n=1")
    reason = refuses(host, port)
    if reason:
        raise _bad("bootstrap_host", reason)
    return Bootstrap(host, port, room)


def _check_handoff(jobs: list[Job]) -> None:
    """What a prefill/decode handoff cannot carry yet: the first token's logprobs live on the
    prefill worker."""
    if any(job.request.sampling.return_logprob for job in jobs):
        raise _bad("logprobs", "a prefill/decode pair returns no logprobs yet: drop logprobs / return_logprob")


def with_bootstrap(request: Request, body: Any, jobs: list[Job]) -> list[Job]:
    """The jobs with the request's bootstrap attached (unchanged when it names none)."""
    boot = bootstrap_of(request, body, len(jobs))
    if boot is None:
        return jobs
    _check_handoff(jobs)
    return [replace(job, request=replace(job.request, bootstrap=boot)) for job in jobs]
