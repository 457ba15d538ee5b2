"""Embeddings on the worker plane: which workers serve them, and how a pool picks one.

Embedding is a capability, not part of every worker: a worker declares it with `can_embed` and
then has `embed(input_ids, cache_salt)`, returning per prompt its last token's final hidden state,
L2-normalised (`Engine.embed`). The co-located engine and a remote radixgate worker (its own
`/v1/embeddings`, sent token ids) declare it; an OpenAI-compatible generation server does not. A
pool declares it too and sends embeddings only to members that do: a 400 when none does, a 503 when none of
them is healthy, retried elsewhere only when the member never took the request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

from radixgate.engine.protocol import GenerateRequest

from ..api.errors import APIError, no_worker_available
from .remote import WorkerUnavailable, failed_on

if TYPE_CHECKING:
    from .pool import WorkerPool

EMBED_ATTEMPTS = 3


class Embedder(Protocol):
    can_embed: bool

    async def embed(self, input_ids: list[list[int]], cache_salt: str | None) -> list[list[float]]:
        """One vector per prompt, in order; ValueError (a 400) saying what to change for a bad one."""


def token_groups(input_ids: list[list[int]], max_tokens: int) -> list[list[list[int]]]:
    """Consecutive prompts in groups of at most `max_tokens` tokens (a longer prompt alone)."""
    groups: list[list[list[int]]] = [[]]
    for ids in input_ids:
        if groups[-1] and sum(map(len, groups[-1])) + len(ids) > max_tokens:
            groups.append([])
        groups[-1].append(ids)
    return groups


def embedder_of(worker: Any) -> Embedder | None:
    """The worker as an `Embedder` when it declares the capability, else None."""
    return cast(Embedder, worker) if getattr(worker, "can_embed", False) is True else None


async def embed_on(pool: WorkerPool, input_ids: list[list[int]], cache_salt: str | None) -> list[list[float]]:
    """On the least busy healthy member that embeds (tenant-salted requests only on salted ones)."""
    if not any(embedder_of(m.backend) for m in pool.members.values()):
        kinds = sorted({m.kind for m in pool.members.values()}) or ["no"]
        raise APIError(
            400,
            f"embeddings are not served by any worker of this pool ({', '.join(kinds)} workers); "
            "add a radixgate worker (--worker http://HOST:PORT) or a co-located engine",
            param="model",
            code="model_not_supported",
        )
    probe = GenerateRequest(rid="embeddings", input_ids=input_ids[0] if input_ids else [], cache_salt=cache_salt)
    tried: set[str] = set()
    last_error = "no worker that serves embeddings is healthy"
    for _ in range(EMBED_ATTEMPTS):
        members = [m for m in pool._eligible(probe, tried) if embedder_of(m.backend)]
        if not members:
            break
        member = min(members, key=lambda m: m.candidate.num_requests)
        tried.add(member.worker_id)
        member.candidate.num_requests += 1
        member.num_requests += 1
        try:
            return await cast(Embedder, member.backend).embed(input_ids, cache_salt)
        except WorkerUnavailable as exc:  # never taken: another member may serve it
            member.num_retried_away += 1
            last_error = f"worker {member.worker_id} ({member.url}): {exc}"
        except RuntimeError as exc:  # taken and failed: never retried
            member.num_failed += 1
            raise failed_on(f"worker {member.worker_id} ({member.url})", exc) from None
        finally:
            member.candidate.num_requests -= 1
    raise no_worker_available(f"no worker could serve the embeddings: {last_error}")
