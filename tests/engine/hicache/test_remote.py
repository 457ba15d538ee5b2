"""HiCache's remote tier on a real Redis shared by two engines (two workers): a prefix computed on one
is loaded on the other; tenants and fingerprints keep blocks apart; the store failing in every way
(down at start, killed, restarted, corrupted, paused) costs hits, never answers or a stall."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import time

import pytest

from radixgate.engine import SamplingParams

GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
TIMEOUT_S = 0.3
RETRY_S = 0.3
HANG_S = 10.0  # a deadline that catches hangs; the assertions are on counters and orderings


def tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 50000) for _ in range(n)]


def worker(make_engine, server, **kw):
    """An engine with a host tier and the remote tier on `server` (no local disk: another machine)."""
    extra = {"url": server.url, "timeout_s": TIMEOUT_S, "retry_interval_s": RETRY_S, "key_prefix": "t:"}
    kw.setdefault("max_total_tokens", 4096)
    return make_engine(
        enable_hicache=True,
        hicache_storage_backend="redis",
        hicache_storage_backend_extra_config=json.dumps(extra),
        **kw,
    )


@pytest.fixture(scope="module")
def workers(redis_server):
    """Workers A and B on one Redis, shared by the tests of this module (engines are slow to build);
    each test uses prompts of its own."""
    from radixgate.engine import Engine, EngineConfig

    engines: list = []
    try:
        for _ in range(2):
            engines.append(worker(lambda **kw: Engine(EngineConfig(**kw)), redis_server))
        yield tuple(engines)
    finally:
        for engine in engines:
            engine.shutdown()


@pytest.fixture(autouse=True)
def store_running_and_workers_idle(request, redis_server):
    """After each test: A and B idle with every tier balanced, and the store up again."""
    yield
    if "workers" in request.fixturenames:
        for engine in request.getfixturevalue("workers"):
            engine.check_idle_invariant()
    if redis_server.proc is None:
        redis_server.start()
        time.sleep(RETRY_S + 0.05)  # the workers' outage ends


def run(engine, ids, salt=None):
    return engine.generate(input_ids=[ids], sampling=GREEDY, cache_salt=salt)[0]


def queued(out) -> float:
    """Arrival to admission: how long the request waited (for the store, among other things)."""
    return out.times["scheduled"] - out.times["arrival"]


def test_a_prefix_computed_on_one_worker_is_loaded_on_another(workers):
    a, b = workers
    prefix = tokens(2000, 1)
    computed = b.stats()["num_prefill_computed_tokens"]
    run(b, tokens(2000, 2))  # a cold prompt of this length: B computes all of it
    assert b.stats()["num_prefill_computed_tokens"] - computed == 2000
    first = run(a, prefix)  # computed on A, written to the store behind its loop
    a.hicache.drain()
    computed = b.stats()["num_prefill_computed_tokens"]
    loaded = run(b, prefix)
    assert first.cached_tokens == 0
    assert loaded.cached_tokens_by_tier["remote"] >= 1900, loaded.cached_tokens_by_tier
    assert loaded.token_ids == first.token_ids  # the same greedy tokens as computing it
    # What B saved: it computed only the part past what it loaded (the saving a TTFT ratio showed before).
    assert b.stats()["num_prefill_computed_tokens"] - computed == 2000 - loaded.cached_tokens
    s = b.stats()
    assert s["prefix_cache_hits_by_tier"]["remote"] >= 1900 and s["hicache_loaded_tokens_remote"] >= 1900
    assert s["hicache_remote_read_failures"] == 0 and s["hicache_remote_up"] == 1
    assert a.stats()["hicache_backup_tokens_remote"] >= 1900


def test_tenants_never_share_blocks(workers):
    a, b = workers
    p = tokens(300, 3)
    want = run(a, p, salt="tenant-a").token_ids
    a.hicache.drain()
    other = run(b, p, salt="tenant-b")
    assert other.cached_tokens == 0 and other.token_ids == want
    same = run(b, p, salt="tenant-a")
    assert same.cached_tokens_by_tier["remote"] == 256 and same.token_ids == want


def test_kv_of_another_layout_or_calibration_is_never_loaded(make_engine, redis_server, workers):
    p = tokens(300, 4)
    fp8 = worker(make_engine, redis_server, kv_cache_dtype="fp8_e4m3")
    run(fp8, tokens(100, 5))  # calibrates its scales on a batch of its own
    want = run(fp8, p).token_ids
    fp8.hicache.drain()
    assert fp8.stats()["hicache_backup_tokens_remote"] >= 256
    fp8_other = worker(make_engine, redis_server, kv_cache_dtype="fp8_e4m3")
    run(fp8_other, tokens(100, 6))  # scales from a different first batch: another fingerprint
    assert run(fp8_other, p).cached_tokens == 0
    out = run(workers[1], p)  # another KV dtype: another fingerprint
    assert out.cached_tokens == 0
    assert run(fp8, p).token_ids == want


def test_corrupt_truncated_foreign_and_forged_values_are_misses(redis_server, workers, forge):
    import redis

    prompts = [tokens(300, 10 + i) for i in range(4)]
    a, b = workers
    want = [run(a, p, salt="tenant:victim").token_ids for p in prompts]
    a.hicache.drain()
    remote = a.hicache.remote_tier
    keys = [remote.format.chain_keys(p[:-1], "tenant:victim", remote.fingerprint, remote.block_size) for p in prompts]
    client = redis.Redis.from_url(redis_server.url)
    flipped = bytearray(client.get("t:" + keys[0][1]))
    flipped[len(flipped) // 3] ^= 0x40
    client.set("t:" + keys[0][1], bytes(flipped))  # a flipped byte in block 1
    client.set("t:" + keys[1][0], client.get("t:" + keys[1][0])[:1000])  # block 0 truncated
    header = {"key": keys[2][2], "fingerprint": remote.fingerprint}
    k, v = remote.format.decode(client.get("t:" + keys[2][2]), header, remote.dtype, remote.block_shape)
    foreign = b"".join(remote.format.encode({**header, "fingerprint": "another-model"}, k, v))
    client.set("t:" + keys[2][2], foreign)  # block 2 written by another model, tag intact
    client.set("t:" + keys[3][1], forge(client.get("t:" + keys[3][1])))  # random KV, SHA-256 recomputed
    client.close()

    failures = b.stats()["hicache_remote_read_failures"]
    outs = [run(b, p, salt="tenant:victim") for p in prompts]
    assert [o.cached_tokens_by_tier["remote"] for o in outs] == [64, 0, 128, 64]
    assert [o.token_ids for o in outs] == want
    assert b.stats()["hicache_remote_read_failures"] == failures + 4


def test_store_down_at_start_serves_and_joins_when_it_comes_up(make_engine, redis_server, workers, caplog):
    redis_server.stop()
    p = tokens(300, 20)
    with caplog.at_level(logging.WARNING):
        a = worker(make_engine, redis_server)
    assert any("does not answer" in r.getMessage() for r in caplog.records)
    first = run(a, p)
    assert first.cached_tokens == 0 and queued(first) < HANG_S
    # The store was known down: the request never started a read it would have had to give up on.
    assert a.stats()["hicache_remote_fetch_timeouts"] == 0
    assert a.stats()["hicache_remote_outages"] >= 1
    redis_server.start()
    time.sleep(RETRY_S + 0.05)
    q = tokens(300, 21)
    want = run(a, q).token_ids  # written now that the store answers
    a.hicache.drain()
    out = run(workers[1], q)
    assert out.cached_tokens_by_tier["remote"] == 256 and out.token_ids == want


def test_store_killed_mid_run_then_restarted_empty(redis_server, workers, caplog):
    a, b = workers
    p1, p2, p3 = tokens(300, 30), tokens(300, 31), tokens(300, 32)
    want1 = run(a, p1).token_ids
    a.hicache.drain()
    outages = a.stats()["hicache_remote_outages"]
    redis_server.stop()  # killed: connections reset, nothing saved
    with caplog.at_level(logging.WARNING, logger="radixgate.engine.hicache"):
        down = run(b, p1)  # the store's blocks are gone with it: recomputed
        assert down.cached_tokens == 0 and down.token_ids == want1
        assert queued(down) < HANG_S  # a killed store fails its reads; the request goes on without them
        run(a, p2)  # A's writes fail or are skipped, its requests do not wait
        a.hicache.drain()
    assert a.stats()["hicache_remote_outages"] > outages
    assert [r for r in caplog.records if "is down" in r.getMessage()], "an outage is logged"
    redis_server.start()  # back, empty
    time.sleep(RETRY_S + 0.05)
    cold = run(b, p2)
    assert cold.cached_tokens_by_tier["remote"] == 0  # a restarted store is cold, not an error
    want3 = run(a, p3).token_ids
    a.hicache.drain()
    warm = run(b, p3)
    assert warm.cached_tokens_by_tier["remote"] == 256 and warm.token_ids == want3


def test_a_paused_store_costs_at_most_the_timeout(redis_server, workers):
    import redis

    a, b = workers
    p, q = tokens(300, 40), tokens(300, 41)
    want = run(a, p).token_ids
    a.hicache.drain()
    noticed = b.stats()["hicache_remote_fetch_timeouts"] + b.stats()["hicache_remote_outages"]
    os.kill(redis_server.proc.pid, signal.SIGSTOP)  # the store stops answering until SIGCONT below
    try:
        b.start()  # the loop on its own thread, so that a second request can run while one waits
        result = {}
        thread = threading.Thread(target=lambda: result.setdefault("p", run(b, p)))
        thread.start()
        other = run(b, q)  # needs the store too: both go on without it after the timeout
        thread.join(timeout=HANG_S)
        slow = result["p"]
        # Both answered while the store still answered nothing (an ordering, not a time bound) ...
        with pytest.raises(redis.TimeoutError):
            redis.Redis.from_url(redis_server.url, socket_timeout=0.2, socket_connect_timeout=0.2).ping()
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
    # ... having given up a read (a fetch timeout) or marked the store down (an outage), whichever came first.
    assert b.stats()["hicache_remote_fetch_timeouts"] + b.stats()["hicache_remote_outages"] > noticed
    assert slow.token_ids == want and slow.cached_tokens_by_tier["remote"] == 0
    assert other.cached_tokens == 0 and other.finish_reason == "length"
    time.sleep(RETRY_S + 0.05)
    later = run(b, p)  # computed above, so in the device cache now
    assert later.token_ids == want


def test_serve_flags_reach_the_engine_config():
    from radixgate.gateway.cli import build_parser, engine_config

    extra = '{"url": "redis://127.0.0.1:1/0", "ttl_s": 60}'
    args = build_parser().parse_args(
        ["--enable-hicache", "--hicache-storage-backend", "redis", "--hicache-storage-backend-extra-config", extra]
    )
    config = engine_config(args)
    assert config.hicache_storage_backend == "redis"
    assert config.hicache_storage_backend_options["ttl_s"] == 60.0
    assert config.hicache_storage_backend_options["url"] == "redis://127.0.0.1:1/0"


def test_disk_budget_and_cache_secret_file_from_serve_flags(tmp_path, monkeypatch):
    from radixgate.engine.cache_secret import load_cache_secret
    from radixgate.gateway.cli import build_parser, engine_config

    monkeypatch.setenv("RADIXGATE_CACHE_SECRET_FILE", "")  # restored after the test: the flag sets it
    secret = tmp_path / "secret"
    secret.write_text("a secret of at least sixteen bytes\n")
    args = build_parser().parse_args(
        ["--enable-hicache", "--hicache-storage-dir", str(tmp_path), "--hicache-storage-size", "0.5"]
        + ["--cache-secret-file", str(secret)]
    )
    assert engine_config(args).hicache_storage_size == 0.5
    got = load_cache_secret()
    assert got.is_configured and got.key == b"a secret of at least sixteen bytes"
    secret.write_text("short")
    with pytest.raises(ValueError, match="at least 16 bytes"):
        engine_config(args)


def test_the_redis_password_comes_from_a_file_never_the_url(redis_server, tmp_path, monkeypatch):
    import redis

    from radixgate.engine.hicache.tiers import create_backend

    options = {"url": redis_server.url, "key_prefix": "pw:", "ttl_s": 0.0, "timeout_s": 1.0, "retry_interval_s": 0.0}
    with pytest.raises(ValueError, match="RADIXGATE_REDIS_PASSWORD_FILE"):
        create_backend("redis", {**options, "url": redis_server.url.replace("//", "//:hunter2@")})
    admin = redis.Redis.from_url(redis_server.url)
    admin.config_set("requirepass", "hunter2")
    try:
        assert not create_backend("redis", options).ping()  # NOAUTH: an error, not a hang
        (tmp_path / "pw").write_text("hunter2\n")
        monkeypatch.setenv("RADIXGATE_REDIS_PASSWORD_FILE", str(tmp_path / "pw"))
        store = create_backend("redis", options)
        store.set([("k", b"v")])
        assert store.get(["k"]) == [b"v"]
        store.close()
    finally:
        admin.execute_command("AUTH", "hunter2")
        admin.config_set("requirepass", "")
        admin.close()


def test_remote_hits_reach_metrics_and_server_info(workers):
    from fastapi.testclient import TestClient

    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig
    from radixgate.gateway.workers.worker import LocalWorker

    a, b = workers
    p = tokens(300, 50)
    run(a, p)
    a.hicache.drain()
    with TestClient(create_app(GatewayConfig(), worker=LocalWorker(b))) as c:
        body = {"input_ids": p, "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
        r = c.post("/generate", json=body)
        assert r.status_code == 200 and r.json()["meta_info"]["cached_tokens"] == 256
        metrics = c.get("/metrics").text
        remote = [line for line in metrics.splitlines() if 'tier="remote"' in line and not line.startswith("#")]
        assert remote and float(remote[0].rsplit(" ", 1)[1]) >= 256
        assert any(line.startswith("radixgate:hicache_loaded_tokens_remote{") for line in metrics.splitlines())
        info = c.get("/server_info").json()  # what the dashboard's tier line reads
        assert info["prefix_cache_hits_by_tier"]["remote"] >= 256
        assert info["hicache_remote_backend"] == "redis" and info["engine_config"]["hicache_storage_backend"] == "redis"


def test_blocks_written_to_the_store_are_announced_and_credited_to_every_worker(make_engine, redis_server):
    """Worker A announces the blocks it writes to the shared store (KV events, medium REMOTE); a router
    following A and B credits B with them too, at the lower-tier share, before B ever saw the prompt."""
    from radixgate.gateway.workers.kv_index import LOWER_TIER_CREDIT, KVEventIndex

    a = worker(make_engine, redis_server, enable_kv_events=True)
    b = worker(make_engine, redis_server, enable_kv_events=True)
    shared: set[int] = set()
    index_a = KVEventIndex("http://127.0.0.1:1", a.stats()["kv_events"], shared)
    index_b = KVEventIndex("http://127.0.0.1:2", b.stats()["kv_events"], shared)
    try:
        deadline = time.monotonic() + HANG_S
        while min(a.kv_events.publisher.num_subscriptions, b.kv_events.publisher.num_subscriptions) < 1:
            assert time.monotonic() < deadline, "the indexes never subscribed"
            time.sleep(0.01)  # until both subscriptions landed (the publisher counts them)
        ids = tokens(320, seed=77)
        run(a, ids)
        deadline = time.monotonic() + 5
        while index_b.match_tokens(ids, None) == 0:
            assert time.monotonic() < deadline, "B was never credited with A's remote blocks"
            time.sleep(0.01)
        assert index_a.match_tokens(ids, None) >= 256  # A: on its device
        assert 0 < index_b.match_tokens(ids, None) <= int(LOWER_TIER_CREDIT * len(ids))
        assert index_b.match_tokens(ids, "another-tenant") == 0
    finally:
        index_a.close()
        index_b.close()
