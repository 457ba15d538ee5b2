"""Cache-aware continuous batching: which requests run in the next forward pass.

Each step is either a prefill batch (new requests, or the next chunk of a long prompt) or a decode
batch (one token for every running request). Prefill goes first, as in SGLang. Waiting requests
are ordered by longest cached prefix (`lpm`) or arrival (`fcfs`); requests arriving together that
share an uncached prefix are admitted one after another so the shared part is computed once.

With priority scheduling, the waiting queue is ordered first by effective priority: the request's
`priority` (negated with schedule_low_priority_values_first), plus one level for every
`priority_aging_steps` scheduler steps it has waited. A request of priority p waiting behind a
stream of fresh arrivals of priority q > p is ahead of every one of them once it has waited
`(q - p) * priority_aging_steps` steps: nothing starves."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..config import EngineConfig, SamplingParams
from ..kvcache.radix_cache import common_prefix_len
from .cache_manager import CacheManager
from .request import CACHE_TIERS, Req, ReqStatus


@dataclass
class Batch:
    reqs: list[Req]
    is_decode: bool
    # A prefill batch with mixed chunks on: this many running requests' decode tokens ride along,
    # after the prefill requests (the last `num_decodes` of `reqs`, one new token each).
    num_decodes: int = 0

    @property
    def num_prefills(self) -> int:
        return 0 if self.is_decode else len(self.reqs) - self.num_decodes


class Scheduler:
    def __init__(
        self, config: EngineConfig, cache_manager: CacheManager, eos_token_ids: frozenset[int], context_len: int
    ):
        self.config = config
        self.cache_manager = cache_manager
        self.eos_token_ids = eos_token_ids
        self.context_len = context_len
        self.forced_finished: list[Req] = []  # finished without a forward pass (cannot grow)
        self.waiting: list[Req] = []
        self.running: list[Req] = []  # decoding requests
        self.chunked: Req | None = None  # a prefill in progress, continued first next step
        self.num_retracted = 0
        self.prefix_cache_queries = 0  # prompt tokens looked up in the cache
        self.prefix_cache_hits = 0  # of those, tokens found
        self.hit_tokens_by_tier = dict.fromkeys(CACHE_TIERS, 0)
        self.num_steps = 0  # schedule() calls: the clock priority aging counts in

    @property
    def num_running(self) -> int:
        return len(self.running) + (self.chunked is not None)

    def is_idle(self) -> bool:
        return not self.waiting and not self.running and self.chunked is None

    def may_prefill(self) -> bool:
        """Whether the next schedule() can run a prefill: a chunk in progress, or a waiting request
        with a running slot and a slot-table row free for it (the admission loop's own limits)."""
        if self.chunked is not None:
            return True
        room = self.num_running < self.config.max_running_requests and self.cache_manager.slot_table.num_free_rows > 0
        return bool(self.waiting) and room

    def check_sampling(self, sampling: SamplingParams) -> None:
        """Raises ValueError for a request option this scheduler is not configured to honour."""
        if sampling.priority and not self.config.enable_priority_scheduling:
            raise ValueError(
                f"priority={sampling.priority} needs priority scheduling: start the server with "
                "--enable-priority-scheduling, or send priority 0 (the default)"
            )

    def add(self, req: Req) -> None:
        req.queued_step = self.num_steps + 1  # the first step that can schedule it: it has waited 0 there
        self.cache_manager.shares.seen(req.cache_salt)  # its tenant is active (fair shares)
        self.waiting.append(req)

    def effective_priority(self, req: Req) -> int:
        """The request's priority, higher first, raised one level per `priority_aging_steps` waited."""
        cfg = self.config
        base = -req.sampling.priority if cfg.schedule_low_priority_values_first else req.sampling.priority
        return base + (self.num_steps - req.queued_step) // cfg.priority_aging_steps

    def schedule(self) -> Batch | None:
        self.num_steps += 1
        batch = self._prefill_batch()
        if batch is not None and self.running and self.config.enable_mixed_chunk:
            self._add_decodes(batch)
        if batch is None and self.running:
            batch = self._decode_batch()
        if batch is None and self.waiting:
            self.cache_manager.wait_for_loads(timeout=0.01)  # requests waiting for disk reads
        return batch

    # ---- prefill ------------------------------------------------------------------------------
    def _order_waiting(self) -> None:
        if len(self.waiting) < 2:
            return
        cache = self.cache_manager.radix_cache
        lens: dict[int, int] = {}
        if self.config.schedule_policy == "lpm" and cache is not None:
            for r in self.waiting:  # a host hit counts too: loading it back beats recomputing
                m = cache.match(r.fill_ids()[:-1], r.cache_salt)
                lens[id(r)] = len(m.device_slots) + len(m.host_slots)
        if self.config.enable_priority_scheduling:  # stable: arrival order among equals
            self.waiting.sort(key=lambda r: (-self.effective_priority(r), -lens.get(id(r), 0)))
        elif lens:
            self.waiting.sort(key=lambda r: -lens[id(r)])

    def _prefill_batch(self) -> Batch | None:
        if not self.waiting and self.chunked is None:
            return None
        cfg, cm = self.config, self.cache_manager
        budget = cfg.max_prefill_tokens
        batch: list[Req] = []
        if self.chunked is not None:
            req, self.chunked = self.chunked, None
            n = min(req.num_uncomputed, budget, cfg.chunked_prefill_size)
            if not cm.ensure_free_pages(cm.pages_needed(req, n), req):
                self._retract(req)
                return None
            budget -= self._extend(req, budget)
            batch.append(req)
        self._order_waiting()
        deferred: list[Req] = []
        while self.waiting and self.chunked is None and budget >= cm.page_size:
            if self.num_running + len(batch) >= cfg.max_running_requests or cm.slot_table.num_free_rows == 0:
                break
            req = self.waiting.pop(0)
            hit = cm.match_and_lock(req)
            if hit.is_loading or self._shares_uncached_prefix(req, hit.num_tokens, batch):
                cm.unlock(hit)
                deferred.append(req)
                continue
            first_chunk = min(req.num_tokens - hit.num_tokens, budget, cfg.chunked_prefill_size)
            if not cm.ensure_free_pages(cm.pages_to_admit(hit, first_chunk), req):
                cm.unlock(hit)
                self.waiting.insert(0, req)
                break
            if "scheduled" not in req.times:  # first admission: count the cache lookup
                req.times["scheduled"] = time.time()
                req.cached_tokens = min(hit.num_tokens, len(req.origin_input_ids))
                req.cached_tokens_by_tier = hit.tokens_by_tier()
                self.prefix_cache_queries += len(req.origin_input_ids)
                self.prefix_cache_hits += req.cached_tokens
                for tier, n in req.cached_tokens_by_tier.items():
                    self.hit_tokens_by_tier[tier] += n
            cm.admit(req, hit)
            req.status = ReqStatus.RUNNING
            budget -= self._extend(req, budget)
            batch.append(req)
        self.waiting[:0] = deferred
        return Batch(batch, is_decode=False) if batch else None

    def _extend(self, req: Req, budget: int) -> int:
        """Allocates the request's next prefill chunk; marks it chunked if the prompt goes on."""
        n = min(req.num_uncomputed, budget, self.config.chunked_prefill_size)
        if n < req.num_uncomputed:
            n -= n % self.cache_manager.page_size if n > self.cache_manager.page_size else 0
            self.chunked = req
        ok = self.cache_manager.ensure_free_pages(self.cache_manager.pages_needed(req, n), req)
        assert ok, "prefill admitted without pages for its chunk"
        self.cache_manager.allocate(req, n)
        req.extend_len = n
        return n

    def _shares_uncached_prefix(self, req: Req, num_cached: int, batch: list[Req]) -> bool:
        threshold = self.config.in_batch_prefix_threshold
        if self.cache_manager.radix_cache is None or not batch:
            return False
        ids = req.fill_ids()
        return any(common_prefix_len(ids, other.fill_ids()) - num_cached >= threshold for other in batch)

    # ---- decode -------------------------------------------------------------------------------
    def _decode_batch(self) -> Batch | None:
        cm = self.cache_manager
        while self.running:
            if cm.ensure_decode_pages(self.running):
                break
            if len(self.running) == 1:
                # A lone request that cannot grow: the pool is smaller than its context.
                req = self.running.pop()
                req.finish_reason = "length"
                self.forced_finished.append(req)
                return None
            self._retract(self.running.pop())
        for req in self.running:
            cm.allocate(req, 1)
            req.extend_len = 1
        return Batch(list(self.running), is_decode=True) if self.running else None

    def _add_decodes(self, batch: Batch) -> None:
        """Mixed chunk (SGLang's --enable-mixed-chunk): every running request decodes in the prefill's
        forward pass, so a long prompt does not stall the streams. Skipped when the pool cannot give
        each a slot without retracting; the next decode batch then sorts that out."""
        cm = self.cache_manager
        if not cm.ensure_decode_pages(self.running):
            return
        for req in self.running:
            cm.allocate(req, 1)
            req.extend_len = 1
        batch.reqs += self.running
        batch.num_decodes = len(self.running)

    def _retract(self, req: Req) -> None:
        """Out of pages: back to the front of the waiting queue; its KV goes to the cache."""
        self.cache_manager.release(req)
        req.status = ReqStatus.WAITING
        self.waiting.insert(0, req)
        self.num_retracted += 1

    # ---- after the forward pass ---------------------------------------------------------------
    def process_result(self, batch: Batch, next_ids: dict[int, int]) -> None:
        """next_ids maps id(req) -> sampled token for requests that reached their last token."""
        self.advance(batch)
        for i, req in enumerate(batch.reqs):
            token = next_ids.get(id(req))
            if token is not None:
                self.accept_token(req, token)
            if i >= batch.num_prefills or req.finish_reason is not None:
                continue  # decodes are running already; finished requests are removed by the engine
            self.cache_manager.cache_unfinished(req)
            if req is not self.chunked:
                self.running.append(req)

    def advance(self, batch: Batch) -> None:
        """The batch ran: its new tokens' KV is computed (overlap.py calls this alone at launch)."""
        for req in batch.reqs:
            req.num_computed += req.extend_len
            req.extend_len = 0

    def accept_token(self, req: Req, token: int) -> None:
        req.output_ids.append(token)
        req.times.setdefault("first_token", time.time())
        self._check_finished(req)

    def _check_finished(self, req: Req) -> None:
        p, token = req.sampling, req.output_ids[-1]
        if p.stop_token_ids and token in p.stop_token_ids:
            req.finish_reason = "stop"
        elif not p.ignore_eos and token in self.eos_token_ids:
            req.finish_reason = "stop"
        elif len(req.output_ids) >= p.max_new_tokens or req.num_tokens >= self.context_len:
            req.finish_reason = "length"

    def remove(self, req: Req) -> None:
        """Takes a finished or aborted request out of every queue and frees what it holds."""
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        if self.chunked is req:
            self.chunked = None
        if req.pool_row is not None:
            self.cache_manager.release(req)
        self.cache_manager.forget(req)
        req.status = ReqStatus.FINISHED
