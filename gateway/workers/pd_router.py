"""`radixgate serve --prefill URL [BOOTSTRAP_PORT] --decode URL ...`: radixgate's router in front of
prefill/decode pairs (`--disaggregation-mode` workers), with the flags parsed as sglang-router
parses them (a prefill's bootstrap port follows its URL; omitted, SGLang's default 8998).

Each request goes to one prefill worker, chosen by the prefix its cache holds and the load routed
to it (the pool's `cache_aware` router over the prefill members), and to one decode worker, chosen
the same way over the decode members (their load is the KV they hold for requests in flight). Both
get the request with the same `bootstrap_room` and the prefill's bootstrap address, as
sglang-router sends them; the answer streams from the decode worker. Tenants stay apart as in any
pool: the salt travels to both on the worker channel."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from radixgate.engine.protocol import Bootstrap, GenerateRequest, StreamDelta

from ..api.errors import APIError
from .member import Member
from .pool import WorkerPool
from .remote import RadixgateWorker, parse_worker_url
from .router import BLOCK_TOKENS, Candidate, PrefixIndex

DEFAULT_BOOTSTRAP_PORT = 8998  # SGLang's --disaggregation-bootstrap-port default
PREFILL_TIMEOUT_S = 120.0


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
        self.num_pd_requests = 0

    async def start(self) -> None:
        await super().start()
        await self.prefill_pool.start()

    async def stop(self) -> None:
        await self.prefill_pool.stop()
        await super().stop()

    def _choose_prefill(self, request: GenerateRequest) -> Member:
        members = self.prefill_pool._eligible(request, set())
        if not members:
            raise APIError(503, "no prefill worker is healthy", code="no_worker_available", type="server_error")
        choice = self.prefill_pool.router.choose(
            [m.candidate for m in members], request.input_ids, request.cache_salt, request.route_hint
        )
        return self.prefill_pool.members[choice.worker_id]

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
            raise
        finally:
            member.candidate.num_requests -= 1
            member.candidate.num_tokens -= load

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        """Prefill and decode at once; a prefill that fails first fails the request at once (the
        decode worker, told by its bootstrap connection or its time-out, releases its pages)."""
        member = self._choose_prefill(request)
        boot = replace(self._bootstrap[member.worker_id], room=random.getrandbits(63))
        request = replace(request, bootstrap=boot)
        prefill = asyncio.create_task(self._prefill(member, request))
        self.num_pd_requests += 1
        decode = super().stream(request)
        try:
            while True:
                step = asyncio.ensure_future(decode.__anext__())
                if not prefill.done():
                    await asyncio.wait({step, prefill}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done() and prefill.exception() is not None:
                    step.cancel()
                    await asyncio.gather(step, return_exceptions=True)
                    raise RuntimeError(f"the prefill worker {member.url} failed: {prefill.exception()}")
                try:
                    delta = await step
                except StopAsyncIteration:
                    return
                yield delta
        finally:
            await decode.aclose()
            if not prefill.done():
                with contextlib.suppress(asyncio.TimeoutError, Exception):
                    await asyncio.wait_for(asyncio.shield(prefill), PREFILL_TIMEOUT_S)
            if prefill.done() and not prefill.cancelled():
                prefill.exception()  # retrieved: a failed prefill has failed the request already

    def stats(self) -> dict[str, Any]:
        stats = super().stats()
        stats["prefill_workers"] = self.prefill_pool.stats().get("workers", [])
        stats["num_pd_requests"] = self.num_pd_requests
        return stats

    def close(self) -> None:
        self.prefill_pool.close()
        super().close()
