"""`radixgate bench trace --url`: the Mooncake excerpt replayed live through the app's /generate (over
the shared engine, in-process): with a pool that never fills, every block the trace reuses is a hit,
so the live hit rate equals the simulated lru replay and the infinite cache exactly."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from radixgate.bench.cache_bounds import load_trace
from radixgate.bench.trace_live import replay_live

EXCERPT = Path(__file__).parents[1] / "bench" / "data" / "mooncake_conversation_head300.jsonl"


def test_a_live_replay_hits_what_the_simulation_hits(client: TestClient) -> None:
    requests = load_trace(EXCERPT, limit=12)
    result = replay_live(client, requests, [True] * len(requests), 16)
    assert result["skipped_requests"] == 0 and result["counted_blocks"] > 0
    assert result["pool_blocks"] == 32768 // 16
    assert result["live"] == result["simulated_lru"] == result["infinite"] > 0
