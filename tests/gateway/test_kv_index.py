"""The router's exact index follows a real engine's KV events: each published batch applied in
sequence, with no gap, flushes and evictions reflected, tenants apart, a restarted index back in sync
through replay, and events that speak CURVE followed with the gateway's key pair (and not without it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from radixgate.engine import Engine, EngineConfig, SamplingParams
from radixgate.gateway.workers.kv_index import KVEventIndex
from radixgate.gateway.workers.router import Candidate, PrefixIndex, Router

PROMPT = list(range(500, 580))  # 5 blocks of 16
STORED_TOKENS = 80  # what the cache keeps of PROMPT after one request: its full blocks


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = Engine(EngineConfig(enable_kv_events=True, max_total_tokens=512))
    yield engine
    engine.check_idle_invariant()
    engine.shutdown()


def _until(predicate: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until `predicate` holds; fails after `timeout_s`."""
    start = time.perf_counter()
    while not predicate():
        assert time.perf_counter() - start < timeout_s, f"not within {timeout_s * 1000:.0f} ms"
        time.sleep(0.001)
    return time.perf_counter() - start


def _generate(engine: Engine, ids: list[int], salt: str | None = None) -> None:
    engine.generate(input_ids=[ids], sampling=SamplingParams(max_new_tokens=1, temperature=0), cache_salt=salt)


def test_index_tracks_stores_and_flushes_in_sequence(engine: Engine) -> None:
    index = KVEventIndex("http://127.0.0.1:1", engine.stats()["kv_events"])
    try:
        _until(lambda: engine.kv_events.publisher.num_subscriptions >= 1, 5.0)  # the subscription landed
        _generate(engine, PROMPT, "tenant-a")
        assert engine.stats()["kv_events"]["num_stored_blocks"] == STORED_TOKENS // 16  # recorded in the step
        # Deadlines here catch hangs only: the assertions are on what was applied, and in which order.
        _until(lambda: index.match_tokens(PROMPT, "tenant-a") == STORED_TOKENS, 10.0)
        assert index.match_tokens(PROMPT, "tenant-b") == 0 and index.match_tokens(PROMPT, None) == 0
        _until(lambda: index.last_seq == engine.stats()["kv_events"]["next_seq"] - 1, 10.0)
        stored_seq = index.last_seq
        assert index.num_gaps == 0  # every batch arrived live, each the one after the last: no gap to fetch
        assert engine.flush_cache()
        engine.step()
        _until(lambda: index.match_tokens(PROMPT, "tenant-a") == 0, 10.0)
        assert index.last_seq > stored_seq  # the clear came as a later batch
        _until(lambda: index.last_seq == engine.stats()["kv_events"]["next_seq"] - 1, 10.0)
        index.observe_worker_seq(engine.stats()["kv_events"]["next_seq"])
        assert index.is_synced and index.num_gaps == 0
    finally:
        index.close()


def test_a_restarted_index_catches_up_through_replay_and_sees_evictions(engine: Engine) -> None:
    _generate(engine, PROMPT)
    late = KVEventIndex("http://127.0.0.1:1", engine.stats()["kv_events"])  # joins after the events
    try:
        # The batches are applied while the replay streams in; the replay counts once its end marker arrives.
        _until(lambda: late.match_tokens(PROMPT, None) >= 64 and late.num_replays >= 1, 2.0)
        for base in range(10_000, 14_000, 1000):  # other prompts push PROMPT out of the 512-token pool
            _generate(engine, list(range(base, base + 150)))
        _until(lambda: late.match_tokens(PROMPT, None) == 0, 2.0)
        next_seq = engine.stats()["kv_events"]["next_seq"]
        _until(lambda: late.last_seq == next_seq - 1, 2.0)  # every batch the worker published, applied
        late.observe_worker_seq(next_seq)
        assert late.is_synced
    finally:
        late.close()


def test_router_prefers_the_worker_whose_events_show_the_prefix(engine: Engine) -> None:
    index = KVEventIndex("http://127.0.0.1:1", engine.stats()["kv_events"])
    try:
        _until(lambda: engine.kv_events.publisher.num_subscriptions >= 1, 5.0)
        _generate(engine, PROMPT)
        _until(lambda: index.match_tokens(PROMPT, None) >= 64, 1.0)
        holder = Candidate("w-holder", PrefixIndex(1000), exact=index)
        other = Candidate("w-other", PrefixIndex(1000))
        choice = Router("cache_aware").choose([other, holder], PROMPT + [1, 2, 3], None)
        assert choice.worker_id == "w-holder" and choice.is_exact and choice.matched_tokens >= 64
        assert choice.best_tokens == choice.matched_tokens
    finally:
        index.close()


def test_an_index_follows_curve_events_with_the_allowed_key_pair(tmp_path, monkeypatch) -> None:
    import json

    import zmq.auth

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    _, server_secret = zmq.auth.create_certificates(str(tmp_path), "worker")
    _, gateway_secret = zmq.auth.create_certificates(str(allowed), "gateway")
    events = {"enable_kv_cache_events": True, "endpoint": "tcp://127.0.0.1:*", "replay_endpoint": "tcp://127.0.0.1:*"}
    events |= {"curve_secret_key_file": server_secret, "curve_allowed_clients_dir": str(allowed)}
    engine = Engine(EngineConfig(kv_events_config=json.dumps(events), max_total_tokens=512))
    try:
        info = engine.stats()["kv_events"]
        assert info["curve_server_key"]
        monkeypatch.delenv("RADIXGATE_KV_EVENTS_CLIENT_KEY_FILE", raising=False)
        with pytest.raises(ValueError, match="RADIXGATE_KV_EVENTS_CLIENT_KEY_FILE"):
            KVEventIndex("http://127.0.0.1:1", info)
        monkeypatch.setenv("RADIXGATE_KV_EVENTS_CLIENT_KEY_FILE", gateway_secret)
        _generate(engine, PROMPT, "tenant-a")
        index = KVEventIndex("http://127.0.0.1:1", info)  # joins late: catches up through the replay socket
        try:
            _until(lambda: index.match_tokens(PROMPT, "tenant-a") >= 64, 5.0)
        finally:
            index.close()
    finally:
        engine.shutdown()
