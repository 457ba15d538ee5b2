"""/metrics: Prometheus text that parses, SGLang / vLLM names, bounded template labels."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(samples: dict, name: str, **labels: str) -> float:
    matches = [v for (n, ls), v in samples.items() if n == name and all((k, v2) in ls for k, v2 in labels.items())]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]


def test_metrics_parse_and_carry_the_known_names(client: TestClient, long_prefix) -> None:
    body = {"model": "tiny", "prompt": long_prefix("metrics"), "max_tokens": 3}
    client.post("/v1/completions", json=body)
    client.post("/v1/completions", json=body)
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    cache_lines = [line for line in r.text.splitlines() if "cache" in line and not line.startswith("#")]
    assert any(line.startswith("sglang:cache_hit_rate") for line in cache_lines)
    samples = _samples(r.text)
    info = client.get("/server_info").json()
    assert _value(samples, "sglang:cache_hit_rate") == info["cache_hit_rate"]
    assert _value(samples, "radixgate:prefix_cache_hits_total") == info["prefix_cache_hits"]
    assert _value(samples, "radixgate:prefix_cache_queries_total") == info["prefix_cache_queries"]
    for name in (
        "sglang:token_usage",
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
    ):
        _value(samples, name)
    assert _value(samples, "sglang:time_to_first_token_seconds_count") == 2
    assert _value(samples, "sglang:e2e_request_latency_seconds_count") == 2
    assert _value(samples, "sglang:generation_tokens_total") == 6
    assert _value(samples, "sglang:cached_tokens_total") > 0
    assert _value(samples, "radixgate:requests_total", endpoint="completions", outcome="ok") == 2


def test_template_labels_are_bounded(make_client) -> None:
    c = make_client(max_template_labels=2)
    for template in ("a", "b", "c", "d"):
        c.post(
            "/v1/completions",
            json={
                "model": "tiny",
                "prompt": f"template {template}",
                "max_tokens": 1,
                "metadata": {"prompt_template": template},
            },
        )
    samples = _samples(c.get("/metrics").text)
    labels = {dict(ls)["template"]: v for (n, ls), v in samples.items() if n == "radixgate:template_requests_total"}
    assert labels == {"a": 1.0, "b": 1.0, "other": 2.0}


def test_each_app_has_its_own_registry(make_client) -> None:
    first, second = make_client(), make_client()
    first.post("/v1/completions", json={"model": "tiny", "prompt": "registry", "max_tokens": 1})
    a = _samples(first.get("/metrics").text)
    b = _samples(second.get("/metrics").text)
    assert _value(a, "sglang:time_to_first_token_seconds_count") == 1
    assert _value(b, "sglang:time_to_first_token_seconds_count") == 0


def test_tier_hits_with_hicache() -> None:
    """With a host tier, prefixes evicted from the device pool come back from host memory."""
    from fastapi.testclient import TestClient

    from radixgate.engine import Engine, EngineConfig
    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig
    from radixgate.gateway.workers.worker import LocalWorker

    engine = Engine(EngineConfig(max_total_tokens=2048, enable_hicache=True, hicache_ratio=4.0))
    try:
        with TestClient(create_app(GatewayConfig(), worker=LocalWorker(engine))) as c:
            prompts = [f"document {i} " + "filler text " * 300 for i in range(5)]  # 3000 tokens > 2048 on device
            for prompt in prompts + prompts[:1]:
                r = c.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 1})
                assert r.status_code == 200
            assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
            samples = _samples(c.get("/metrics").text)
            tiers = {
                dict(ls)["tier"]: v for (n, ls), v in samples.items() if n == "radixgate:prefix_cache_tier_hits_total"
            }
            assert tiers["host"] > 0
            assert sum(tiers.values()) == _value(samples, "radixgate:prefix_cache_hits_total")
            assert _value(samples, "radixgate:hicache_host_used_tokens") > 0
        engine.check_idle_invariant()
    finally:
        engine.shutdown()
