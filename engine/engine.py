"""The engine: requests in, tokens out. One loop: schedule, run, sample, post-process."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import torch

from .bridge import AbortRequest, AddRequest, CallInLoop, Inbox, LoopThread, Message, Wake, asyncio_listener
from .config import EngineConfig, SamplingParams, num_threads
from .distributed.layers import check_tp_shape, local_kv_heads
from .distributed.tensor_parallel import TensorParallel
from .distributed.tier_mirror import attach_mirror
from .hicache.tiers import build_hicache
from .kvcache.kv_events import KVEventRecorder
from .kvcache.kv_pool import KVPool
from .kvcache.slot_table import SlotTable
from .models.loader import load_model, load_tokenizer, read_config
from .models.tiny import TINY_NAME, ensure_tiny_checkpoint
from .protocol import EngineStats
from .runner.cuda_graph import attach_decode_graphs, wants_cuda_graphs
from .runner.detokenizer import Detokenizer
from .runner.grammar import GrammarBackend
from .runner.model_runner import ModelRunner
from .runner.penalties import MinNewTokens, Penalties, apply_logit_bias
from .runner.sampler import Sampler
from .scheduler.cache_manager import CacheManager
from .scheduler.overlap import RunAhead
from .scheduler.request import GenerateOutput, Req, ReqStatus, StreamDelta, check_request
from .scheduler.scheduler import Batch, Scheduler

_CPU_KV_BUDGET_BYTES = 512 << 20  # default pool size on CPU when max_total_tokens is not given


class Engine:
    def __init__(self, config: EngineConfig | None = None):
        self.config = config = config or EngineConfig()
        threads = num_threads()
        if threads:
            torch.set_num_threads(threads)
        path = ensure_tiny_checkpoint() if config.model_path == TINY_NAME else config.model_path
        self.model_name = TINY_NAME if config.model_path == TINY_NAME else os.path.basename(path.rstrip("/"))
        self.model_config = mc = read_config(path)
        check_tp_shape(mc, config.tp_size)  # a model that cannot be split fails before any rank starts
        torch.manual_seed(config.random_seed)
        self.tensor_parallel = tp = TensorParallel(config, path) if config.tp_size > 1 else None
        loaded = tp.load_model() if tp else load_model(path, config.torch_dtype, config.device)
        model, self.checkpoint_kv_scales = loaded
        self.tokenizer = load_tokenizer(path)
        self.detokenizer = Detokenizer(self.tokenizer)
        self.context_len = mc.max_position_embeddings
        self.vocab_size = mc.vocab_size
        eos = set(mc.eos_token_ids) | ({self.tokenizer.eos_token_id} - {None})

        ps = config.page_size
        num_pages = self._capacity_tokens() // ps
        self.pool = KVPool(
            num_pages * ps + (ps if wants_cuda_graphs(config) else 0),  # + a scratch page for padded graph rows
            mc.num_layers,
            local_kv_heads(mc, config.tp_size),  # each rank's pool: its share of the KV heads
            mc.head_dim,
            config.kv_torch_dtype,
            config.device,
            self.checkpoint_kv_scales,
        )
        if tp is not None:
            tp.start_ranks(self.pool.num_slots)  # same slots on every rank: the scheduler's indices address all
        self.slot_table = SlotTable(config.max_running_requests, self.context_len + 1, config.device)
        self.hicache = build_hicache(config, self.pool, path) if config.enable_hicache else None
        if tp is not None and self.hicache is not None:
            attach_mirror(self.hicache, tp)  # every tier move rank 0 makes, each rank makes on its own heads
        self.cache_manager = CacheManager.from_config(config, num_pages, self.slot_table, self.hicache)
        self.kv_events = KVEventRecorder.attach(config.kv_events(), self.cache_manager.radix_cache)
        self.scheduler = Scheduler(config, self.cache_manager, frozenset(eos), self.context_len)
        self.penalties = Penalties(self.vocab_size, config.device)
        self.sampler = Sampler([apply_logit_bias, MinNewTokens(eos), self.penalties])
        self.grammars = GrammarBackend(self.tokenizer, self.vocab_size, sorted(eos))
        self.sampler.processors.append(self.grammars.apply_mask)
        self.runner = ModelRunner(model, self.pool, self.slot_table, config.attention_backend)
        self.cuda_graph = attach_decode_graphs(config, self.runner, self.context_len + 1, scratch_slot=num_pages * ps)

        self.run_ahead = RunAhead(self) if config.enable_overlap_schedule else None
        self._reqs: dict[str, Req] = {}
        self._rid_counter = itertools.count()
        self._inbox = Inbox()
        self._loop_thread = LoopThread("radixgate-engine", self._loop, self._inbox)
        self._stopping = False
        self.fatal_error: str | None = None
        self.num_prompt_tokens = self.num_generation_tokens = self.num_finished_reqs = 0

    def _capacity_tokens(self) -> int:
        if self.config.max_total_tokens is not None:
            return self.config.max_total_tokens
        mc, cfg = self.model_config, self.config
        kv_heads = local_kv_heads(mc, cfg.tp_size)  # per rank: its share of the KV heads in the same budget
        per_token = KVPool.bytes_per_token(mc.num_layers, kv_heads, mc.head_dim, cfg.kv_torch_dtype)
        if cfg.device.startswith("cuda"):
            free, _ = torch.cuda.mem_get_info()
            budget = int(free * cfg.mem_fraction_static)
        else:
            budget = _CPU_KV_BUDGET_BYTES
        return budget // per_token

    # ---- requests in --------------------------------------------------------------------------
    def validate(self, input_ids: list[int], sampling: SamplingParams) -> None:
        """Raises ValueError saying what to change; nothing is allocated."""
        check_request(input_ids, sampling, self.vocab_size, self.context_len, self.cache_manager.capacity)
        self.scheduler.check_sampling(sampling)  # priority without priority scheduling
        if sampling.grammar_key is not None:
            self.grammars.compile(sampling.grammar_key)  # cached; compiled on the caller's thread

    def _make_req(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        cache_salt: str | None,
        rid: str | None,
        on_update: Callable[[Req, StreamDelta], None] | None,
    ) -> Req:
        self.validate(input_ids, sampling)
        rid = rid if rid is not None else f"req-{next(self._rid_counter)}"
        if rid in self._reqs:
            raise ValueError(f"request id {rid!r} is already in use: give each request its own id")
        req = Req(rid, input_ids, sampling, cache_salt, on_update)
        if sampling.grammar_key is not None:
            req.grammar = self.grammars.new_matcher(sampling.grammar_key)
        return req

    def _add(self, req: Req) -> None:
        self._reqs[req.rid] = req
        self.num_prompt_tokens += len(req.origin_input_ids)
        self.scheduler.add(req)

    def _encode_all(self, prompts: list[str] | str | None, input_ids: list | None) -> list[list[int]]:
        if (prompts is None) == (input_ids is None):
            raise ValueError("give exactly one of prompts= or input_ids=")
        if prompts is not None:
            prompts = [prompts] if isinstance(prompts, str) else prompts
            return [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        assert input_ids is not None
        return [input_ids] if input_ids and isinstance(input_ids[0], int) else list(input_ids)

    # ---- the loop -----------------------------------------------------------------------------
    def step(self) -> bool:
        """One scheduling round; returns False when there was nothing to run."""
        if self.run_ahead is not None:  # overlap scheduling (scheduler/overlap.py)
            ran = self.run_ahead.step()
        else:
            batch = self.scheduler.schedule()
            if batch is not None:
                self.run_batch(batch)
            ran = batch is not None
        for req in self.scheduler.forced_finished:
            self._finish(req)
        self.scheduler.forced_finished.clear()
        if self.kv_events is not None:
            self.kv_events.flush()  # this step's tree changes, as one event batch
        return ran

    def run_batch(self, batch: Batch) -> None:
        """Forward, sample, and apply the tokens: the synchronous step."""
        logits, sampled_reqs = self.runner.forward(batch)
        next_ids = self.sampler(logits, sampled_reqs) if sampled_reqs else []
        self.grammars.accept(sampled_reqs, next_ids)
        self.scheduler.process_result(batch, {id(r): t for r, t in zip(sampled_reqs, next_ids, strict=False)})
        self.num_generation_tokens += len(sampled_reqs)
        for req in sampled_reqs:
            self._after_token(req)

    # Per-request boundaries: what one request's sampling, grammar, detokenization or listener
    # raises is recorded on it (`Req.fail`) and ends that request alone, with finish_reason "error",
    # its pages freed by `_finish` like any other; the loop goes on with the others.
    def _after_token(self, req: Req) -> None:
        text = self.detokenizer.update(req) if req.tracks_text else ""
        if req.error is not None or req.finish_reason is not None:
            self._finish(req, text if req.tracks_text else None)
        elif req.on_update is not None and not req.send(req.take_delta(text, None)):
            self._finish(req, "")  # its listener is gone: end it, freeing its pages

    def _finish(self, req: Req, last_text: str | None = None) -> None:
        self.scheduler.remove(req)
        self.penalties.release(req.rid)
        if last_text is None:
            last_text = self.detokenizer.update(req) if req.on_update else ""
        text = req.text if req.tracks_text else self.detokenizer.final_text(req)
        if req.error is not None:
            req.finish_reason = "error"
        req.times["finished"] = time.time()
        req.result = req.output(text)
        self._reqs.pop(req.rid, None)
        self.num_finished_reqs += 1
        if req.on_update is not None:
            req.send(req.take_delta(last_text, req.result))

    def _abort_now(self, rid: str) -> None:
        req = self._reqs.get(rid)
        if req is not None and req.status is not ReqStatus.FINISHED:
            req.finish_reason = "abort"
            self._finish(req)

    def _handle(self, message: Message) -> None:
        match message:
            case AddRequest(req):
                self._add(req)
            case AbortRequest(rid):
                self._abort_now(rid)
            case CallInLoop(fn, future):
                try:
                    future.set_result(fn())
                except BaseException as e:  # handed to the caller's thread, not swallowed
                    future.set_exception(e)
            case Wake():
                pass

    def _loop(self) -> None:
        try:
            while not self._stopping:
                # busy: take what arrived and step on; idle: wait briefly for work
                for message in self._inbox.drain(timeout=0.05 if self.scheduler.is_idle() else 0):
                    self._handle(message)
                self.step()
        except BaseException as e:
            self.fatal_error = f"engine loop crashed: {type(e).__name__}: {e}"
            for req in list(self._reqs.values()):
                req.finish_reason = "abort"
                req.result = req.output(req.text)
                if req.on_update:
                    req.on_update(req, StreamDelta([], "", True, req.result))
            raise

    def start(self) -> None:
        """Runs the loop on a background thread (the gateway's mode). Idempotent."""
        self._loop_thread.start()

    def _run_in_loop(self, fn: Callable[[], Any]) -> Any:
        if self.fatal_error and not self._loop_thread.is_current():
            raise RuntimeError(self.fatal_error)
        return self._loop_thread.call(fn)

    # ---- public API ---------------------------------------------------------------------------
    def generate(
        self,
        prompts: list[str] | str | None = None,
        input_ids: list | None = None,
        sampling: SamplingParams | list[SamplingParams] | None = None,
        cache_salt: str | None = None,
    ) -> list[GenerateOutput]:
        ids_list = self._encode_all(prompts, input_ids)
        params = sampling if isinstance(sampling, list) else [sampling or SamplingParams()] * len(ids_list)
        reqs = [self._make_req(ids, p, cache_salt, None, None) for ids, p in zip(ids_list, params, strict=False)]
        if not self._loop_thread.is_started:
            for req in reqs:
                self._add(req)
            while any(r.status is not ReqStatus.FINISHED for r in reqs):
                self.step()
        else:
            done = [threading.Event() for _ in reqs]
            for req, event in zip(reqs, done, strict=False):
                req.on_update = lambda r, d, e=event: d.finished and e.set()
                self._inbox.put(AddRequest(req))
            for event in done:
                event.wait()
        results = [r.result for r in reqs if r.result is not None]
        assert len(results) == len(reqs), "a finished request holds its result"
        return results

    async def stream(
        self,
        *,
        input_ids: list[int] | None = None,
        prompt: str | None = None,
        sampling: SamplingParams | None = None,
        cache_salt: str | None = None,
        rid: str | None = None,
    ) -> AsyncGenerator[StreamDelta, None]:
        """Yields token deltas; closing the generator early aborts the request."""
        if (prompt is None) == (input_ids is None):
            raise ValueError("give exactly one of prompt= or input_ids=")
        ids = list(input_ids) if input_ids is not None else self.tokenizer.encode(prompt, add_special_tokens=False)
        deltas: asyncio.Queue[StreamDelta] = asyncio.Queue()
        req = self._make_req(ids, sampling or SamplingParams(), cache_salt, rid, asyncio_listener(deltas))
        if self.fatal_error:
            raise RuntimeError(self.fatal_error)
        self.start()
        self._inbox.put(AddRequest(req))
        finished = False
        try:
            while not finished:
                delta = await deltas.get()
                finished = delta.finished
                if finished and self.fatal_error:  # the loop died under this request (a rank, say): loudly
                    raise RuntimeError(self.fatal_error)
                yield delta
        finally:
            if not finished:
                self.abort(req.rid)

    def abort(self, rid: str) -> None:
        if self._loop_thread.is_current():
            self._abort_now(rid)
        else:
            self._inbox.put(AbortRequest(rid))

    def embed(self, input_ids: list[list[int]]) -> torch.Tensor:
        """Last-token final hidden states, L2-normalised, [B, hidden] (`ModelRunner.embed`), run in the loop."""
        return self._run_in_loop(lambda: self.runner.embed(input_ids, self.vocab_size, self.context_len))

    def engine_stats(self) -> EngineStats:
        """The engine's counters, typed; `stats()` is their dict."""
        cm, sched, cap = self.cache_manager, self.scheduler, self.cache_manager.capacity
        held = cap - cm.available_tokens - cm.evictable_tokens - cm.pinned_tokens  # by running requests (SGLang's)
        queries, hits = sched.prefix_cache_queries, sched.prefix_cache_hits
        dtype = self.config.kv_cache_dtype if self.config.kv_cache_dtype != "auto" else str(self.pool.dtype)
        events = self.kv_events.info(cap) if self.kv_events is not None else {"kv_events": None}
        tiers = self.hicache.stats(cap - cm.available_tokens) if self.hicache is not None else {}
        return EngineStats(
            model=self.model_name,
            cache_hit_rate=hits / queries if queries else 0.0,
            token_usage=held / cap,
            max_total_num_tokens=cap,
            tp_size=self.config.tp_size,
            kv_heads_per_rank=self.pool.num_kv_heads,  # capacity is per rank
            num_running_reqs=sched.num_running,
            num_waiting_reqs=len(sched.waiting),
            prefix_cache_queries=queries,
            prefix_cache_hits=hits,
            num_prompt_tokens=self.num_prompt_tokens,
            num_generation_tokens=self.num_generation_tokens,
            num_prefill_computed_tokens=self.runner.num_prefill_tokens,
            num_finished_reqs=self.num_finished_reqs,
            num_retracted_reqs=sched.num_retracted,
            cuda_graph=self.cuda_graph,
            cuda_graph_steps=self.runner.decode_graphs.num_runs if self.runner.decode_graphs else 0,
            overlap_steps=self.run_ahead.num_launched if self.run_ahead else 0,
            available_tokens=cm.available_tokens,
            evictable_tokens=cm.evictable_tokens,
            protected_tokens=cm.protected_tokens,
            page_size=self.config.page_size,
            kv_cache_dtype=dtype.removeprefix("torch."),
            context_len=self.context_len,
            disable_radix_cache=self.config.disable_radix_cache,
            prefix_cache_hits_by_tier=dict(sched.hit_tokens_by_tier),
            hicache_enabled=self.hicache is not None,
            kv_events=events.pop("kv_events"),
            extra={**events, **tiers, **cm.pin_stats()},  # the events' block counts, HiCache's tiers, pins
        )

    def stats(self) -> dict[str, Any]:
        """The documented stats dict (`cache_hit_rate`, `token_usage`, ...), which `/server_info` extends."""
        return self.engine_stats().to_dict()

    def flush_cache(self, cache_salt: str | None = None) -> bool:
        """Drops every cached prefix; refused (False) while requests are in flight. With `cache_salt`,
        drops only that tenant's namespace, refused only while a request holds one of its prefixes."""

        def flush() -> bool:
            radix_cache = self.cache_manager.radix_cache
            if cache_salt is not None:
                return radix_cache is None or radix_cache.reset_namespace(cache_salt)
            if not self.scheduler.is_idle():
                return False
            self.cache_manager.flush()
            return True

        return self._run_in_loop(flush)

    def check_idle_invariant(self, wait_s: float = 10.0) -> None:
        """Asserts the pool accounting once the engine is idle. With the loop thread running, waits
        up to `wait_s` for requests still finishing or being aborted (an abort sent by another
        thread lands at the loop's next step)."""
        deadline = time.monotonic() + wait_s
        while self._loop_thread.is_started and not self._run_in_loop(self.scheduler.is_idle):
            assert time.monotonic() < deadline, f"engine still busy after {wait_s} s"
            time.sleep(0.01)

        def check() -> None:
            assert self.scheduler.is_idle(), "engine is not idle"
            self.cache_manager.check_idle_invariant()

        self._run_in_loop(check)

    def shutdown(self) -> None:
        self._stopping = True
        self._loop_thread.stop()
        for rid in list(self._reqs):
            self._abort_now(rid)
        if self.hicache is not None:
            self.hicache.close()
        if self.kv_events is not None:
            self.kv_events.close()
            self.kv_events = None
        if self.tensor_parallel is not None:
            self.tensor_parallel.shutdown()
