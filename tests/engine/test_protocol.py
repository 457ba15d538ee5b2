"""The engine's side of the contract: `stats()` is `EngineStats` as the documented dict (the keys
`/server_info` starts from), and the typed stats survive their own dict shape."""

from __future__ import annotations

from radixgate.engine import EngineStats, GenerateOutput, SamplingParams, StreamDelta, protocol

# Engine.stats() of an engine without KV events or HiCache: SGLang's names, then radixgate's own.
DOCUMENTED = {
    "model",
    "cache_hit_rate",
    "token_usage",
    "max_total_num_tokens",
    "tp_size",
    "kv_heads_per_rank",
    "num_running_reqs",
    "num_waiting_reqs",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "num_prompt_tokens",
    "num_generation_tokens",
    "num_prefill_computed_tokens",
    "num_finished_reqs",
    "num_retracted_reqs",
    "cuda_graph",
    "cuda_graph_steps",
    "overlap_steps",
    "available_tokens",
    "evictable_tokens",
    "protected_tokens",
    "page_size",
    "kv_cache_dtype",
    "context_len",
    "disable_radix_cache",
    "prefix_cache_hits_by_tier",
    "cache_hit_tokens_device",
    "cache_hit_tokens_host",
    "cache_hit_tokens_disk",
    "cache_hit_tokens_remote",
    "hicache_enabled",
    "kv_events",
    # TTL pins (kvcache/pins.py)
    "num_pins",
    "max_pinned_tokens",
    "pinned_tokens_device",
    "pinned_tokens_host",
    "num_pins_expired",
    "num_pins_released_over_budget",
    "num_pins_refused",
    "num_fair_evictions",  # tenant fair shares (kvcache/tenant_share.py)
}


def test_the_public_names_are_the_protocol_types() -> None:
    assert (SamplingParams, GenerateOutput, StreamDelta, EngineStats) == (
        protocol.SamplingParams,
        protocol.GenerateOutput,
        protocol.StreamDelta,
        protocol.EngineStats,
    )


def test_stats_is_the_typed_stats_as_the_documented_dict(make_engine) -> None:
    engine = make_engine(max_total_tokens=1024)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    for _ in range(2):  # the second one hits the first one's prefix
        engine.generate(input_ids=[prompt], sampling=SamplingParams(max_new_tokens=2, temperature=0.0))
    typed = engine.engine_stats()
    stats = engine.stats()
    assert set(stats) == DOCUMENTED
    assert stats == typed.to_dict()
    assert typed.num_finished_reqs == 2 and typed.prefix_cache_hits > 0 and typed.max_total_num_tokens == 1024
    assert EngineStats.from_dict(stats) == typed


def test_stats_with_events_keep_their_extra_keys(make_engine) -> None:
    engine = make_engine(enable_kv_events=True, max_total_tokens=256)
    stats = engine.stats()
    assert stats["kv_events"]["block_size"] == stats["kv_events_block_size"]  # extra keys, merged in
    typed = EngineStats.from_dict(stats)
    assert typed.kv_events == stats["kv_events"] and typed.extra["num_gpu_blocks"] == stats["num_gpu_blocks"]
    assert typed.to_dict() == stats
