"""`WorkerPool`: many workers behind the one `Worker` interface the routes use.

The pool tokenizes in front (tokenizer files only), asks the `Router` for a worker, streams from
it, and keeps the set healthy:
- health checks every `health_check_interval_s` (a radixgate worker's `/health`, then its
  `/server_info` for stats and KV capacity); a worker that fails one is out until one succeeds,
  and comes back with an empty prefix index (a restarted engine has an empty cache);
- a request is retried elsewhere only when the worker never took it (`WorkerUnavailable`:
  refused, 502/503/504 before admission); one rejected (4xx) or taken and failed (`WorkerError`)
  fails alone, never retried: the next worker would fail it, or die on it, the same way. Refused
  connections and stopped engines take the worker out at once, other failures after
  `CIRCUIT_FAILURES` in a row;
- `drain(id)` stops new requests to a worker and removes it once its requests finish.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

from radixgate.engine.protocol import GenerateRequest, StreamDelta

from ..api.errors import APIError, no_worker_available
from .embeddings import embed_on
from .kv_index import KVEventIndex, reachable
from .member import Member
from .remote import HTTPWorker, WorkerUnavailable, failed_on, is_down, make_remote_worker, parse_worker_url
from .router import BLOCK_TOKENS, Candidate, PrefixIndex, Router
from .worker import LocalWorker, asked_fields, render_chat

log = logging.getLogger("radixgate.gateway.pool")
CIRCUIT_FAILURES = 3
MAX_ATTEMPTS = 3
DEFAULT_CAPACITY_TOKENS = 1 << 20  # until a worker reports its KV capacity
ADDITIVE_STATS = (
    "max_total_num_tokens",
    "num_running_reqs",
    "num_waiting_reqs",
    "num_prompt_tokens",
    "num_generation_tokens",
    "num_finished_reqs",
    "available_tokens",
    "evictable_tokens",
    "protected_tokens",
)


class WorkerPool:
    """Routes each request to one of its members; implements the `Worker` interface."""

    def __init__(
        self,
        tokenizer: Any,
        model_name: str,
        *,
        policy: str = "cache_aware",
        worker_api_key: str | None = None,
        allow_unsalted_workers: bool = False,
        health_check_interval_s: float = 1.0,
        context_len: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.model_name = model_name
        self._context_len = context_len
        self.router = Router(policy)
        self.worker_api_key = worker_api_key
        self.allow_unsalted_workers = allow_unsalted_workers
        self.health_check_interval_s = health_check_interval_s
        self.members: dict[str, Member] = {}
        self._remote_blocks: set[int] = set()  # blocks in a shared HiCache remote store (KV events)
        self._next_id = 0
        self._owner: dict[str, Member] = {}  # rid -> member streaming it
        self._health_task: asyncio.Task[None] | None = None

    # ---- membership ------------------------------------------------------------------------
    def _new_id(self) -> str:
        worker_id = f"w{self._next_id}"
        self._next_id += 1
        return worker_id

    def add_local(self, worker: LocalWorker) -> Member:
        capacity = int(worker.stats().get("max_total_num_tokens", DEFAULT_CAPACITY_TOKENS))
        worker_id = self._new_id()
        index = PrefixIndex(capacity // BLOCK_TOKENS)
        member = Member(worker_id, f"local:{worker_id}", "local", worker, Candidate(worker_id, index))
        member.is_healthy = worker.failure() is None
        member.engine_stats = worker.stats()
        self._context_len = min(self._context_len or worker.context_len, worker.context_len)
        self.members[worker_id] = member
        return member

    def add_remote(self, url: str) -> Member:
        """Adds an HTTP worker, unhealthy until its first health check passes."""
        kind, _ = parse_worker_url(url)
        if any(m.url == url and not m.is_draining for m in self.members.values()):
            raise ValueError(f"worker {url} is already in the pool")
        backend = make_remote_worker(url, self.worker_api_key, self.tokenize_output)
        worker_id = self._new_id()
        index = PrefixIndex(DEFAULT_CAPACITY_TOKENS // BLOCK_TOKENS)
        member = Member(worker_id, url, kind, backend, Candidate(worker_id, index))
        self.members[worker_id] = member
        return member

    def drain(self, worker_id: str) -> Member:
        """No new requests go to the worker; it leaves the pool when its last request ends."""
        member = self.members.get(worker_id)
        if member is None:
            raise KeyError(worker_id)
        member.is_draining = True
        self._remove_if_drained(member)
        return member

    def _remove_if_drained(self, member: Member) -> None:
        if member.is_draining and member.candidate.num_requests == 0 and member.worker_id in self.members:
            del self.members[member.worker_id]
            if member.candidate.exact is not None:
                member.candidate.exact.close()
            self.router.forget_worker(member.worker_id)
            if isinstance(member.backend, HTTPWorker):
                task = asyncio.get_running_loop().create_task(member.backend.aclose())
                task.add_done_callback(lambda t: t.exception())
            else:
                member.backend.close()

    # ---- health ------------------------------------------------------------------------------
    async def check_member(self, member: Member) -> bool:
        """One health check; a worker coming back starts with an empty index (its cache is gone)."""
        try:
            if isinstance(member.backend, HTTPWorker):
                stats = await member.backend.probe()
            else:
                failure = member.backend.failure()
                if failure:
                    raise RuntimeError(failure)
                stats = member.backend.stats()
        except Exception as exc:  # any failure to answer is a failed check
            if member.is_healthy:
                log.warning("worker %s (%s) failed its health check: %s", member.worker_id, member.url, exc)
            member.is_healthy = False
            member.last_error = f"{type(exc).__name__}: {exc}"
            return False
        if not member.is_healthy:
            log.info("worker %s (%s) is healthy", member.worker_id, member.url)
            member.candidate.index.clear()
        member.is_healthy, member.consecutive_failures = True, 0
        if stats:
            member.engine_stats = stats
            self._follow_kv_events(member, stats.get("kv_events"))
            capacity = stats.get("max_total_num_tokens")
            if capacity:
                member.candidate.index.capacity_blocks = max(1, int(capacity) // BLOCK_TOKENS)
            if stats.get("context_len"):
                self._context_len = min(self._context_len or stats["context_len"], stats["context_len"])
        return True

    def _follow_kv_events(self, member: Member, info: Any) -> None:
        """Subscribes to a worker's KV events once it advertises them; a restarted worker (new
        endpoints) gets a fresh index. The health check's sequence number keeps the index honest."""
        exact = member.candidate.exact
        if not isinstance(info, dict) or not info.get("endpoint"):
            return
        if exact is not None and exact.endpoint != reachable(info["endpoint"], member.url):
            exact.close()
            exact = member.candidate.exact = None
        if exact is None:
            try:
                exact = member.candidate.exact = KVEventIndex(member.url, info, self._remote_blocks)
            except Exception as exc:  # events are an optimisation: route approximately without them
                log.warning("cannot follow KV events of %s: %s", member.url, exc)
                return
        if "next_seq" in info:
            exact.observe_worker_seq(int(info["next_seq"]))

    async def _health_loop(self) -> None:
        while True:
            await asyncio.gather(*(self.check_member(m) for m in list(self.members.values())))
            await asyncio.sleep(self.health_check_interval_s)

    async def start(self) -> None:
        await asyncio.gather(*(self.check_member(m) for m in list(self.members.values())))
        self._health_task = asyncio.create_task(self._health_loop())

    async def stop(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            await asyncio.gather(self._health_task, return_exceptions=True)
        for member in self.members.values():
            if member.candidate.exact is not None:
                member.candidate.exact.close()
                member.candidate.exact = None
            if isinstance(member.backend, HTTPWorker):
                await member.backend.aclose()

    # ---- the Worker interface ----------------------------------------------------------------
    @property
    def context_len(self) -> int:
        return self._context_len or int(getattr(self.tokenizer, "model_max_length", 0) or 0) or 4096

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def detokenize(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def tokenize_output(self, text: str) -> list[int]:
        return self.tokenize(text, add_special_tokens=False)

    def render_chat(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        return render_chat(self.tokenizer, messages, tools)

    @property
    def unsupported_fields(self) -> frozenset[str]:
        """The fields no member honours (every field, for an empty pool: nothing can serve)."""
        kinds = [m.backend.unsupported_fields for m in self.members.values()]
        return frozenset.intersection(*kinds) if kinds else frozenset()

    def validate(self, request: GenerateRequest) -> None:
        """A field no member of the pool honours is a 400 naming it; the rest is checked by a local
        engine when the pool has one, else here (the remote engine checks it again)."""
        unserved = sorted(asked_fields(request.sampling) & self.unsupported_fields)
        if unserved:
            kinds = sorted({m.kind for m in self.members.values()})
            raise ValueError(
                f"{', '.join(unserved)}: not honoured by any worker of this pool ({', '.join(kinds)} workers); "
                "remove it, or add a radixgate worker"
            )
        local = next((m.backend for m in self.members.values() if isinstance(m.backend, LocalWorker)), None)
        if local is not None:
            local.validate(request)
            return
        if not request.input_ids:
            raise ValueError("the prompt is empty; send at least one token")
        vocab = len(self.tokenizer)
        if max(request.input_ids) >= vocab:  # in C: a generator over every id cost ~0.8 ms a request
            raise ValueError(f"token ids must be below the vocabulary size {vocab}")

    def _eligible(self, request: GenerateRequest, tried: set[str]) -> list[Member]:
        asked = asked_fields(request.sampling)
        members = [
            m
            for m in self.members.values()
            if not asked & m.backend.unsupported_fields  # a member never drops part of a request
            and m.is_healthy
            and not m.is_draining
            and m.worker_id not in tried
            and m.consecutive_failures < CIRCUIT_FAILURES
        ]
        if request.cache_salt is not None and not self.allow_unsalted_workers:
            salted = [m for m in members if m.supports_salt]
            if members and not salted:
                raise APIError(
                    503,
                    "no worker can keep this tenant's cache apart from other tenants (foreign workers take no "
                    "salt, radixgate workers need --worker-api-key); start the gateway with "
                    "--allow-unsalted-workers to share their caches across tenants",
                    code="no_salted_worker",
                    type="server_error",
                )
            members = salted
        return members

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        """Stream from the chosen worker; before the first delta, a failing worker is skipped and
        the request goes to another."""
        tried: set[str] = set()
        last_error = "no worker is healthy"
        for _ in range(MAX_ATTEMPTS):
            members = self._eligible(request, tried)
            if not members:
                break
            choice = self.router.choose(
                [m.candidate for m in members], request.input_ids, request.cache_salt, request.route_hint
            )
            member = self.members[choice.worker_id]
            tried.add(member.worker_id)
            load = choice.cost_tokens + request.sampling.max_new_tokens
            member.candidate.num_requests += 1
            member.candidate.num_tokens += load
            member.num_requests += 1
            self._owner[request.rid] = member
            started = False
            try:
                async with aclosing(member.backend.stream(request)) as deltas:
                    async for delta in deltas:
                        started = True
                        if delta.output is not None:
                            member.prompt_tokens += delta.output.prompt_tokens
                            member.cached_tokens += delta.output.cached_tokens
                            member.predicted_tokens += choice.matched_tokens
                            member.best_tokens += choice.best_tokens
                            member.num_exact_routes += choice.is_exact
                            if choice.matched_tokens >= BLOCK_TOKENS and delta.output.cached_tokens == 0:
                                member.num_mispredicted += 1
                        yield delta
                member.consecutive_failures = 0
                return
            except (WorkerUnavailable, RuntimeError) as exc:
                member.num_failed += 1
                member.last_error = str(exc)
                if is_down(exc) or (isinstance(member.backend, LocalWorker) and member.backend.failure()):
                    member.is_healthy = False  # out until a health check passes
                if started or not isinstance(exc, WorkerUnavailable):  # taken and failed: never retried
                    raise failed_on(f"worker {member.worker_id} ({member.url})", exc) from None
                member.num_retried_away += 1
                member.consecutive_failures += 1
                last_error = f"worker {member.worker_id} ({member.url}): {exc}"
                log.warning("retrying request %s elsewhere: %s", request.rid, last_error)
            finally:
                member.candidate.num_requests -= 1
                member.candidate.num_tokens -= load
                self._owner.pop(request.rid, None)
                self._remove_if_drained(member)
        raise no_worker_available(f"no worker could serve the request: {last_error}")

    can_embed = True  # routes them to members that embed; a 400 naming the pool's kinds when none does

    async def embed(self, input_ids: list[list[int]], cache_salt: str | None) -> list[list[float]]:
        return await embed_on(self, input_ids, cache_salt)

    def abort(self, rid: str) -> None:
        member = self._owner.get(rid)
        if member is not None and member.kind == "local":
            member.backend.abort(rid)
        # An HTTP worker aborts when the pool closes the stream's connection.

    def usage(self) -> dict[str, Any]:
        """`stats()`'s hit rate and token usage, without the per-worker snapshots (sampled per request)."""
        return self._totals()[1]

    def stats(self) -> dict[str, Any]:
        totals, usage = self._totals()
        return {
            "model": self.model_name,
            **totals,
            **usage,
            "context_len": self.context_len,
            "router_policy": self.router.policy,
            "workers": [m.snapshot() for m in self.members.values()],
        }

    def _totals(self) -> tuple[dict[str, Any], dict[str, Any]]:
        totals: dict[str, Any] = dict.fromkeys(ADDITIVE_STATS, 0)
        queries = hits = 0
        for member in self.members.values():
            s = member.backend.stats() if member.kind == "local" else member.engine_stats
            for key in ADDITIVE_STATS:
                value = s.get(key)
                if isinstance(value, (int, float)):
                    totals[key] += value
            if "prefix_cache_queries" in s:
                queries += s["prefix_cache_queries"]
                hits += s.get("prefix_cache_hits", 0)
            else:  # a foreign worker: what its responses reported
                queries += member.prompt_tokens
                hits += member.cached_tokens
                totals["num_running_reqs"] += member.candidate.num_requests
        capacity = totals["max_total_num_tokens"]
        held = capacity - totals["available_tokens"] - totals["evictable_tokens"] if capacity else 0
        hit_rate, token_usage = hits / queries if queries else 0.0, held / capacity if capacity else 0.0
        usage = {"cache_hit_rate": hit_rate, "token_usage": token_usage}
        return totals, usage | {"prefix_cache_queries": queries, "prefix_cache_hits": hits}

    def flush_cache(self, cache_salt: str | None = None) -> bool:
        """Every member's cache, or one tenant's namespace on the workers that keep tenants apart."""
        ok = True
        for member in list(self.members.values()):
            if cache_salt is not None and not member.supports_salt:
                continue  # nothing of this tenant's is kept apart there
            try:
                ok = bool(member.backend.flush_cache(cache_salt)) and ok
            except Exception as exc:  # an unreachable worker has nothing to flush
                log.warning("flush on worker %s failed: %s", member.worker_id, exc)
                continue
            member.candidate.index.clear(cache_salt, everything=cache_salt is None)
        return ok

    def check_idle_invariant(self) -> None:
        for member in list(self.members.values()):
            if member.is_healthy:
                member.backend.check_idle_invariant()

    def failure(self) -> str | None:
        if any(m.is_healthy and not m.is_draining for m in self.members.values()):
            return None
        errors = "; ".join(f"{m.worker_id}: {m.last_error or 'not checked yet'}" for m in self.members.values())
        return f"no healthy worker ({errors or 'the pool is empty'})"

    def close(self) -> None:
        for member in self.members.values():
            if member.kind == "local":
                member.backend.close()
