"""`radixgate serve --prefill URL [BOOTSTRAP_PORT] --decode URL ...`: radixgate's router in front of
prefill/decode pairs (`--disaggregation-mode` workers), with the flags parsed as sglang-router
parses them (a prefill's bootstrap port follows its URL; omitted, SGLang's default 8998).

Each request goes to one prefill worker, chosen by the prefix its cache holds and the load routed
to it (the pool's `cache_aware` router over the prefill members, exact from their KV events when
they publish them), and to one decode worker, chosen by its cache and its memory (`choose_decode`:
the prompt tokens it would be sent, the tokens in flight there, and the free KV it reports in
`/server_info`). Both get the request with the same `bootstrap_room` and the prefill's bootstrap
address, as sglang-router sends them; the answer streams from the decode worker. A prefill worker
that dies or refuses before the first token is replaced by another, in a fresh room. Tenants stay
apart as in any pool: the salt travels to both on the worker channel."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from radixgate.engine.protocol import Bootstrap, GenerateRequest, StreamDelta

from ..api.errors import APIError, no_worker_available
from .failures import WorkerUnavailable, broke, prefill_may_be_at_fault, prefill_retryable
from .member import Member
from .pool import DEFAULT_CAPACITY_TOKENS, WorkerPool
from .remote import RadixgateWorker, failed_on, is_down, parse_worker_url
from .router import BLOCK_TOKENS, Candidate, PrefixIndex, block_hashes

DEFAULT_BOOTSTRAP_PORT = 8998  # SGLang's --disaggregation-bootstrap-port default
PREFILL_TIMEOUT_S = 120.0
MAX_PREFILL_ATTEMPTS = 3
RELEASE_WAIT_S = 10.0  # how long the other side's own failure is awaited before its stream is closed
log = logging.getLogger("radixgate.gateway.pd_router")


class PrefillFailed(Exception):
    """The prefill worker failed the request before any token reached the client: another may serve it."""


def free_kv_tokens(member: Member) -> tuple[float, float]:
    """The KV a decode worker reported free (`available_tokens` of its `/server_info`, less the
    tokens this router has in flight there) and evictable; unknown (not reported yet): its capacity."""
    stats = member.engine_stats
    capacity = float(stats.get("max_total_num_tokens") or DEFAULT_CAPACITY_TOKENS)
    available = float(stats.get("available_tokens", capacity))
    return max(0.0, available - member.candidate.num_tokens), float(stats.get("evictable_tokens", 0))


def parse_pd_flags(
    prefill: Sequence[Sequence[str]], decode: Sequence[str]
) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...]]:
    """`--prefill URL [BOOTSTRAP_PORT]` (repeatable) and `--decode URL`, as sglang-router takes them."""
    prefills = []
    for args in prefill:
        if not 1 <= len(args) <= 2:
            raise ValueError("--prefill takes a URL and an optional bootstrap port: --prefill URL [BOOTSTRAP_PORT]")
        url, port = args[0], args[1] if len(args) == 2 else "none"
        if port.lower() == "none":
            port = str(DEFAULT_BOOTSTRAP_PORT)
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--prefill {url} {port}: the bootstrap port must be a port number or 'none'")
        parse_worker_url(url)
        prefills.append((url, int(port)))
    for url in decode:
        parse_worker_url(url)
    if bool(prefills) != bool(decode):
        raise ValueError("PD routing needs at least one --prefill and one --decode")
    return tuple(prefills), tuple(decode)


def add_pd_flags(p: argparse.ArgumentParser) -> None:
    """`radixgate serve`'s disaggregation flags: a worker's role, and the PD router's workers."""
    d = p.add_argument_group("prefill/decode disaggregation (SGLang's flags)")
    d.add_argument(
        "--disaggregation-mode",
        default="null",
        choices=["null", "prefill", "decode"],
        help="this worker's role in a prefill/decode pair (null: co-located)",
    )
    d.add_argument(
        "--disaggregation-transfer-backend",
        default="tcp",
        choices=["tcp", "shm"],
        help="how KV moves: tcp (between machines) or shm (two processes on one host)",
    )
    d.add_argument(
        "--disaggregation-bootstrap-port", type=int, default=8998, help="a prefill worker's bootstrap server"
    )
    d.add_argument("--disaggregation-bootstrap-host", default="127.0.0.1", help="its interface (default: loopback)")
    d.add_argument(
        "--prefill",
        action="append",
        nargs="+",
        default=[],
        metavar="URL [BOOTSTRAP_PORT]",
        help="route to this prefill worker (repeatable; with --decode: radixgate's PD router, as sglang-router's)",
    )
    d.add_argument("--decode", action="append", default=[], metavar="URL", help="a decode worker (repeatable)")
    d.add_argument(
        "--disaggregation-prefill-bootstrap",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a decode worker connects only to these prefill bootstrap servers (repeatable)",
    )


def disaggregation_of(args: argparse.Namespace) -> Any:
    from .pd_worker import DisaggConfig

    return DisaggConfig(
        args.disaggregation_mode,
        args.disaggregation_transfer_backend,
        args.disaggregation_bootstrap_host,
        args.disaggregation_bootstrap_port,
        tuple(args.disaggregation_prefill_bootstrap),
    )


def pd_workers_of(args: argparse.Namespace) -> Any:
    return parse_pd_flags(args.prefill, args.decode) if args.prefill or args.decode else None


class PDWorker(RadixgateWorker):
    """A radixgate P/D worker: `/generate` with SGLang's bootstrap fields."""

    def body(self, request: GenerateRequest) -> dict[str, Any]:
        body = super().body(request)
        if request.bootstrap is not None:
            boot = request.bootstrap
            body |= {"bootstrap_host": boot.host, "bootstrap_port": boot.port, "bootstrap_room": boot.room}
        return body


class _Pool(WorkerPool):
    def add_remote(self, url: str) -> Member:
        if any(m.url == url for m in self.members.values()):
            raise ValueError(f"worker {url} is already in the pool")
        backend = PDWorker(url, self.worker_api_key)
        worker_id = self._new_id()
        member = Member(
            worker_id, url, "radixgate", backend, Candidate(worker_id, PrefixIndex((1 << 20) // BLOCK_TOKENS))
        )
        self.members[worker_id] = member
        return member


class PDRouter(_Pool):
    """The decode workers are this pool's members (their answers are the answers); the prefill
    workers are a pool of their own, each with the bootstrap port it serves."""

    def __init__(
        self,
        tokenizer: Any,
        model_name: str,
        prefills: Sequence[tuple[str, int]],
        decodes: Sequence[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, model_name, **kwargs)
        self.prefill_pool = _Pool(tokenizer, model_name, **kwargs)
        self._bootstrap: dict[str, Bootstrap] = {}
        for url, port in prefills:
            member = self.prefill_pool.add_remote(url)
            self._bootstrap[member.worker_id] = Bootstrap(urlsplit(url).hostname or "127.0.0.1", port, 0)
        for url in decodes:
            self.add_remote(url)
        self.num_pd_requests = self.num_prefill_retries = 0

    async def start(self) -> None:
        await super().start()
        await self.prefill_pool.start()

    async def stop(self) -> None:
        await self.prefill_pool.stop()
        await super().stop()

    def _choose_prefill(self, request: GenerateRequest, tried: set[str]) -> Member | None:
        members = self.prefill_pool._eligible(request, tried)
        if not members:
            return None
        choice = self.prefill_pool.router.choose(
            [m.candidate for m in members], request.input_ids, request.cache_salt, request.route_hint
        )
        member = self.prefill_pool.members[choice.worker_id]
        member.predicted_tokens += choice.matched_tokens
        member.best_tokens += choice.best_tokens
        member.num_exact_routes += choice.is_exact
        return member

    def choose_decode(self, request: GenerateRequest) -> Member:
        """The decode worker by its cache and its memory: the one that needs the fewest prompt tokens
        sent to it and has the least queued (tokens in flight there), plus the cached tokens it would
        evict to hold the request (what its reported free KV, less what is in flight, lacks); a
        worker whose free and evictable KV cannot hold the request at all is chosen only when none
        can. Ties go to the most free KV. The prompt is recorded in the chosen one's prefix index."""
        members = self._eligible(request, set())
        if not members:
            errors = "; ".join(f"{m.url}: {m.last_error or 'not checked yet'}" for m in self.members.values())
            raise no_worker_available(f"no decode worker is healthy ({errors})", retry_after=False)
        n = len(request.input_ids)
        hashes = block_hashes(request.input_ids, request.cache_salt)

        def score(m: Member) -> tuple[bool, float, float, int]:
            matched = min(n, m.candidate.matched_tokens(request.input_ids, request.cache_salt, hashes))
            need = n - matched + request.sampling.max_new_tokens
            free, evictable = free_kv_tokens(m)
            fits = free + evictable >= need
            cost = (n - matched) + m.candidate.num_tokens + max(0.0, need - free)
            return not fits, cost, -free, m.candidate.num_requests

        chosen = min(members, key=score)
        chosen.candidate.index.record(hashes, request.cache_salt)
        return chosen

    async def _prefill(self, member: Member, request: GenerateRequest) -> None:
        load = len(request.input_ids)
        member.candidate.num_requests += 1
        member.candidate.num_tokens += load
        member.num_requests += 1
        try:
            async for delta in member.backend.stream(request):
                if delta.output is not None:
                    member.prompt_tokens += delta.output.prompt_tokens
                    member.cached_tokens += delta.output.cached_tokens
        except Exception as exc:
            member.num_failed += 1
            member.last_error = str(exc)
            if is_down(exc) or broke(exc):
                member.is_healthy = False  # out until a health check passes
            raise
        finally:
            member.candidate.num_requests -= 1
            member.candidate.num_tokens -= load

    async def _decode(self, member: Member, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        load = len(request.input_ids) + request.sampling.max_new_tokens
        member.candidate.num_requests += 1
        member.candidate.num_tokens += load
        member.num_requests += 1
        self._owner[request.rid] = member
        try:
            async with contextlib.aclosing(member.backend.stream(request)) as deltas:
                async for delta in deltas:
                    if delta.output is not None:
                        member.prompt_tokens += delta.output.prompt_tokens
                        member.cached_tokens += delta.output.cached_tokens
                    yield delta
        except Exception as exc:
            member.num_failed += 1
            member.last_error = str(exc)
            if is_down(exc) or broke(exc):
                member.is_healthy = False
            worker = f"decode worker {member.worker_id} ({member.url})"
            if isinstance(exc, WorkerUnavailable):  # what the routes answer for a worker that would not take it
                message = f"{worker} could not take the request: {exc}"
                raise no_worker_available(message, retry_after=False) from exc
            if isinstance(exc, RuntimeError):
                raise failed_on(worker, exc) from exc
            raise
        finally:
            member.candidate.num_requests -= 1
            member.candidate.num_tokens -= load
            self._owner.pop(request.rid, None)
            self._remove_if_drained(member)

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        """Prefill and decode at once. A prefill worker that dies or refuses before the first token
        reached the client is left out and the request goes to another registered prefill worker,
        in a fresh bootstrap room, once the decode side has let go of the first room's pages; after
        the first token, or when the decode side is at fault, the request fails cleanly."""
        tried: set[str] = set()
        errors: list[str] = []
        for attempt in range(MAX_PREFILL_ATTEMPTS):
            member = self._choose_prefill(request, tried)
            if member is None:
                break
            tried.add(member.worker_id)
            started = False
            # A retry's own request id: the decode worker may still hold the last attempt's (closed
            # by this router, it lets go once it notices), and would refuse the id as in use.
            sent = request if attempt == 0 else replace(request, rid=f"{request.rid}~retry{attempt}")
            try:
                async for delta in self._handoff(member, sent):
                    started = True
                    yield delta
                return
            except PrefillFailed as exc:
                if started:
                    raise RuntimeError(str(exc)) from None
                errors.append(str(exc))
                self.num_prefill_retries += 1
                log.warning("request %s: %s; trying another prefill worker", request.rid, exc)
        raise no_worker_available(
            f"no prefill worker could serve the request: {'; '.join(errors) or 'no prefill worker is healthy'}"
        )

    async def _handoff(self, member: Member, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        """One attempt: `member` prefills in a fresh room, a decode worker streams the answer.
        PrefillFailed when the prefill worker failed it before the decode side sent a token (the
        decode side's stream has ended, its reservation released, when this raises)."""
        boot = replace(self._bootstrap[member.worker_id], room=random.getrandbits(63))
        request = replace(request, bootstrap=boot)
        decode_member = self.choose_decode(request)
        prefill = asyncio.create_task(self._prefill(member, request))
        self.num_pd_requests += 1
        decode = self._decode(decode_member, request)
        started = False
        try:
            while True:
                step = asyncio.ensure_future(decode.__anext__())
                if not prefill.done():
                    await asyncio.wait({step, prefill}, return_when=asyncio.FIRST_COMPLETED)
                # Once a token came, the decode side holds all it needs: a late prefill failure is moot.
                if not started and not step.done() and prefill.exception() is not None:
                    failed = prefill.exception()
                    if broke(failed):  # the decode side fails too once its transfer breaks: let it let go
                        await asyncio.wait({step}, timeout=RELEASE_WAIT_S)
                    step.cancel()  # still waiting (a refusal): closing its stream releases its pages
                    done = await asyncio.gather(step, return_exceptions=True)
                    decode_exc = done[0] if isinstance(done[0], Exception) else None
                    if prefill_retryable(failed, decode_exc):
                        raise PrefillFailed(f"the prefill worker {member.url} failed: {failed}")
                    if isinstance(failed, ValueError):
                        raise failed  # the prefill worker rejected the request: the client's to fix
                    raise APIError(
                        503, f"the prefill worker {member.url} failed: {failed}", code="kv_transfer_failed"
                    ) from failed
                try:
                    delta = await step
                except StopAsyncIteration:
                    return
                except Exception as exc:
                    if not started:  # the decode side failed first: was it the prefill worker's fault?
                        if prefill_may_be_at_fault(exc):
                            await asyncio.wait({prefill}, timeout=RELEASE_WAIT_S)
                        failed = prefill.exception() if prefill.done() else None
                        if prefill_retryable(failed, exc):
                            raise PrefillFailed(f"the prefill worker {member.url} failed: {failed}") from exc
                    raise
                started = True
                yield delta
        except BaseException:
            # Failed or abandoned: a prefill still running (waiting for a room no decode worker will
            # register, or sending to one that let go) is cancelled, and its worker drops the room.
            prefill.cancel()
            raise
        finally:
            await decode.aclose()
            if not prefill.done():
                await asyncio.wait({prefill}, timeout=PREFILL_TIMEOUT_S)
            if prefill.done() and not prefill.cancelled():
                prefill.exception()  # retrieved: a failed prefill has failed the request already

    def stats(self) -> dict[str, Any]:
        stats = super().stats()
        stats["prefill_workers"] = self.prefill_pool.stats().get("workers", [])
        stats["num_pd_requests"] = self.num_pd_requests
        stats["num_prefill_retries"] = self.num_prefill_retries
        return stats

    def close(self) -> None:
        self.prefill_pool.close()
        super().close()
