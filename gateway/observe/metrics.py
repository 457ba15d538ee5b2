"""Prometheus metrics on a per-app registry, under the names SGLang and vLLM users already graph.

Engine state (hit rate, KV usage, queue lengths, prefix-cache counters) is read from the
worker at scrape time by `EngineCollector`; request latencies and token counts are observed
by the gateway as requests finish. Template labels are bounded: the first `max_template_labels`
templates seen keep their own label, later ones are counted under `other`, so a label never
moves and counters stay monotone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

OTHER_TEMPLATE = "other"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FRACTION_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)
TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# `*_created` series double the output and no SGLang/vLLM dashboard reads them.
disable_created_metrics()


# Outcomes of requests that got no result, and the HTTP status each is answered with.
STATUS_OF_OUTCOME = {"invalid": 400, "aborted": 499, "engine_error": 503}


class EngineCollector(Collector):
    """Reads `worker.stats()` on each scrape, so gauges are never stale."""

    def __init__(
        self, stats: Callable[[], dict[str, Any]], model_name: str, num_gateway_queued: Callable[[], int]
    ) -> None:
        self._stats = stats
        self._model = model_name
        self._num_gateway_queued = num_gateway_queued

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["model_name"])
        family.add_metric([self._model], float(value))
        return family

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["model_name"])
        family.add_metric([self._model], float(value))
        return family

    def collect(self) -> Iterable[Metric]:
        s = self._stats()
        running, waiting = s.get("num_running_reqs", 0), s.get("num_waiting_reqs", 0)
        usage = s.get("token_usage", 0.0)
        yield self._gauge(
            "sglang:cache_hit_rate",
            "Prompt tokens served from cache / queried, since start.",
            s.get("cache_hit_rate", 0.0),
        )
        yield self._gauge("sglang:token_usage", "KV tokens held by running requests / KV capacity.", usage)
        yield self._gauge("sglang:num_running_reqs", "Requests in the running batch.", running)
        yield self._gauge("sglang:num_queue_reqs", "Requests waiting in the engine's queue.", waiting)
        yield self._gauge("sglang:max_total_num_tokens", "KV capacity in tokens.", s.get("max_total_num_tokens", 0))
        yield self._counter(
            "radixgate:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            s.get("prefix_cache_queries", 0),
        )
        yield self._counter(
            "radixgate:prefix_cache_hits",
            "Prompt tokens served from the prefix cache (any tier).",
            s.get("prefix_cache_hits", 0),
        )
        tiers = CounterMetricFamily(
            "radixgate:prefix_cache_tier_hits",
            "Prompt tokens served from cache, by tier.",
            labels=["model_name", "tier"],
        )
        by_tier = s.get("prefix_cache_hits_by_tier") or {"device": s.get("prefix_cache_hits", 0)}
        for tier, hits in sorted(by_tier.items()):
            tiers.add_metric([self._model, str(tier)], float(hits))
        yield tiers
        for key in ("available_tokens", "evictable_tokens", "protected_tokens"):
            if key in s:
                yield self._gauge(f"radixgate:kv_{key}", f"KV pool accounting: {key.replace('_', ' ')}.", s[key])
        pinned = GaugeMetricFamily(
            "radixgate:pinned_tokens", "KV tokens held by TTL pins, by tier (kvcache/pins.py).", labels=["tier"]
        )
        for tier in ("device", "host"):
            pinned.add_metric([tier], float(s.get(f"pinned_tokens_{tier}", 0)))
        yield pinned
        for key, value in sorted(s.items()):  # HiCache's tier sizes and traffic, when it is on
            if key.startswith("hicache_") and isinstance(value, (int, float)) and not isinstance(value, bool):
                yield self._gauge(f"radixgate:{key}", f"HiCache: {key[len('hicache_') :].replace('_', ' ')}.", value)
        yield self._gauge(
            "radixgate:gateway_queued_requests",
            "Requests admitted by the gateway, no token yet.",
            self._num_gateway_queued(),
        )
        yield from self._per_worker(s.get("workers") or [])
        # The names Kubernetes inference gateways (Gateway API Inference Extension, llm-d) scrape.
        yield self._gauge("vllm:num_requests_waiting", "Requests waiting (vLLM name).", waiting)
        yield self._gauge("vllm:num_requests_running", "Requests running (vLLM name).", running)
        yield self._gauge("vllm:kv_cache_usage_perc", "KV cache usage, 0..1 (vLLM name).", usage)
        yield self._gauge("vllm:gpu_cache_usage_perc", "KV cache usage, 0..1 (older vLLM name).", usage)
        capacity = s.get("max_total_num_tokens")
        if capacity:  # GIE and llm-d size their block indexes from this (KV-event blocks when events are on)
            block_size = int(s.get("kv_events_block_size") or s.get("page_size") or 1)
            info = GaugeMetricFamily(
                "vllm:cache_config_info",
                "KV cache configuration (vLLM name): block size in tokens and the pool in blocks.",
                labels=["model_name", "block_size", "num_gpu_blocks"],
            )
            info.add_metric([self._model, str(block_size), str(int(capacity) // block_size)], 1.0)
            yield info

    def _per_worker(self, workers: list[dict[str, Any]]) -> Iterable[Metric]:
        """A routing gateway's breakdown by worker (its responses' tokens, as the router saw them)."""
        if not workers:
            return
        labels = ["model_name", "worker", "url"]
        gauge, counter = GaugeMetricFamily, CounterMetricFamily
        rows = (
            ("radixgate:worker_healthy", "1 while the worker passes health checks.", "healthy", gauge),
            ("radixgate:worker_in_flight_requests", "Requests in flight to the worker.", "in_flight", gauge),
            ("radixgate:worker_requests", "Requests routed to the worker.", "requests", counter),
            ("radixgate:worker_failed_requests", "Requests the worker failed.", "failed", counter),
            ("radixgate:worker_prompt_tokens", "Prompt tokens served by the worker.", "prompt_tokens", counter),
            ("radixgate:worker_cached_tokens", "Prompt tokens it served from cache.", "cached_tokens", counter),
            # Why a hit was missed: the router predicted `predicted` tokens on the chosen worker, the best
            # worker held `best_available`, the engine served `cached`. predicted < best: a routing choice;
            # served < predicted: a stale index; best == 0: the workload had no reuse.
            (
                "radixgate:worker_predicted_prefix_tokens",
                "Prefix tokens the router predicted.",
                "predicted_tokens",
                counter,
            ),
            ("radixgate:worker_best_prefix_tokens", "Longest prefix any worker held.", "best_tokens", counter),
            ("radixgate:worker_mispredicted_requests", "Predicted >= 1 block, served none.", "mispredicted", counter),
            ("radixgate:worker_exact_routes", "Routes decided on the worker's KV events.", "exact_routes", counter),
            ("radixgate:worker_kv_index_synced", "1 while the KV-event index is in sync.", "kv_index_synced", gauge),
        )
        for name, doc, key, kind in rows:
            family = kind(name, doc, labels=labels)
            for w in workers:
                family.add_metric([self._model, str(w["id"]), str(w["url"])], float(w.get(key) or 0))
            yield family


class Metrics:
    """All the gateway's metrics, registered on one registry that belongs to one app."""

    def __init__(
        self,
        model_name: str,
        stats: Callable[[], dict[str, Any]],
        num_gateway_queued: Callable[[], int],
        max_template_labels: int = 20,
    ) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        self.max_template_labels = max_template_labels
        self._labels_by_tenant: dict[str, set[str]] = {}  # each tenant's labels count against its own cap
        self._lock = threading.Lock()
        r, m = self.registry, ["model_name"]
        self.registry.register(EngineCollector(stats, model_name, num_gateway_queued))
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Time to first token, at the gateway.",
            m,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token = Histogram(
            "sglang:inter_token_latency_seconds",
            "Gap between streamed tokens.",
            m,
            buckets=TOKEN_GAP_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Request latency, arrival to last token.",
            m,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_time = Histogram(
            "sglang:queue_time_seconds", "Engine arrival to first scheduling.", m, buckets=LATENCY_BUCKETS, registry=r
        )
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Prompt tokens processed.", m, registry=r)
        self.generation_tokens = Counter("sglang:generation_tokens", "Tokens generated.", m, registry=r)
        self.cached_tokens = Counter("sglang:cached_tokens", "Prompt tokens served from cache.", m, registry=r)
        self.requests = Counter(
            "radixgate:requests",
            "Finished requests by endpoint and outcome.",
            ["model_name", "endpoint", "outcome"],
            registry=r,
        )
        self.failed = Counter(
            "radixgate:failed_requests",
            "Requests that ended without a result, by endpoint, outcome and HTTP status code.",
            ["model_name", "endpoint", "outcome", "status_code"],
            registry=r,
        )
        self.rejections = Counter(
            "radixgate:rejected_requests", "Requests refused before the engine, by reason.", ["reason"], registry=r
        )
        t = ["model_name", "template"]
        self.template_requests = Counter("radixgate:template_requests", "Requests per prompt template.", t, registry=r)
        self.template_prompt_tokens = Counter(
            "radixgate:template_prompt_tokens", "Prompt tokens per template.", t, registry=r
        )
        self.template_cached_tokens = Counter(
            "radixgate:template_cached_tokens", "Cached prompt tokens per template.", t, registry=r
        )
        self.template_recomputed_static = Counter(
            "radixgate:template_recomputed_static_tokens",
            "Static-prefix tokens recomputed (not cached) per template.",
            t,
            registry=r,
        )
        self.cache_missed = Counter(
            "radixgate:cache_missed_tokens",
            "Prompt tokens not served from cache, by reason (gateway/diagnostics/); never retracted recomputes.",
            ["model_name", "reason"],
            registry=r,
        )
        self.cached_fraction = Histogram(
            "radixgate:cached_fraction",
            "Per request: prompt tokens served from cache / prompt tokens.",
            m,
            buckets=FRACTION_BUCKETS,
            registry=r,
        )
        # Export zeros before the first request, so dashboards see the series from the start.
        for metric in (
            self.ttft,
            self.inter_token,
            self.e2e,
            self.queue_time,
            self.prompt_tokens,
            self.generation_tokens,
            self.cached_tokens,
            self.cached_fraction,
        ):
            metric.labels(model_name)
        # labels() takes a lock and validates its values on every call; no series is ever removed,
        # so each one is looked up once and kept (template labels are bounded by template_label).
        self._series: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _series_of(self, metric: Any, *values: str) -> Any:
        key = (id(metric), values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = metric.labels(*values)
        return series

    def template_label(self, template: str, tenant: str = "default") -> str:
        """The template's own label while its tenant has fewer than `max_template_labels`, else
        `other`: one tenant's many templates never push another's out of their labels."""
        with self._lock:
            mine = self._labels_by_tenant.setdefault(str(tenant), set())
            if template in mine:
                return template
            if len(mine) < self.max_template_labels:
                mine.add(template)
                return template
        return OTHER_TEMPLATE

    def observe_finished(
        self,
        *,
        endpoint: str,
        template: str,
        tenant: str = "default",
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int,
        recomputed_static: int,
        ttft: float | None,
        e2e: float,
        queue_time: float | None,
        token_gaps: list[float],
    ) -> None:
        model, series = self.model_name, self._series_of
        series(self.requests, model, endpoint, "ok").inc()
        series(self.prompt_tokens, model).inc(prompt_tokens)
        series(self.generation_tokens, model).inc(completion_tokens)
        series(self.cached_tokens, model).inc(cached_tokens)
        if prompt_tokens:
            series(self.cached_fraction, model).observe(cached_tokens / prompt_tokens)
        if ttft is not None:
            series(self.ttft, model).observe(ttft)
        if queue_time is not None:
            series(self.queue_time, model).observe(max(0.0, queue_time))
        series(self.e2e, model).observe(e2e)
        gaps = series(self.inter_token, model)
        for gap in token_gaps:
            gaps.observe(gap)
        label = self.template_label(template, tenant)
        series(self.template_requests, model, label).inc()
        series(self.template_prompt_tokens, model, label).inc(prompt_tokens)
        series(self.template_cached_tokens, model, label).inc(cached_tokens)
        series(self.template_recomputed_static, model, label).inc(recomputed_static)

    def observe_cache_miss(self, reason: str, tokens: int) -> None:
        self._series_of(self.cache_missed, self.model_name, reason).inc(tokens)

    def observe_failed(self, endpoint: str, outcome: str, status_code: int | None = None) -> None:
        """A request without a result: refused (4xx), failed (5xx) or aborted (499)."""
        status = status_code or STATUS_OF_OUTCOME.get(outcome, 500)
        self.requests.labels(self.model_name, endpoint, outcome).inc()
        self.failed.labels(self.model_name, endpoint, outcome, str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
