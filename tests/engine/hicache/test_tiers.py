"""HiCache through the engine: the same greedy tokens from every tier, warm restart, disk faults and
forgeries, write policies, per-tier accounting."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from radixgate.engine import SamplingParams

GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
POOL = 1024


def prompts(n: int, length: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1000, 50000) for _ in range(length)] for _ in range(n)]


def run(engine, ids: list[int], salt: str | None = None):
    return engine.generate(input_ids=[ids], sampling=GREEDY, cache_salt=salt)[0]


def hicache(make_engine, storage=None, **kw):
    kw.setdefault("max_total_tokens", POOL)
    return make_engine(
        enable_hicache=True, hicache_ratio=2.0, hicache_storage_dir=str(storage) if storage else None, **kw
    )


PROMPTS = prompts(3, 300)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Greedy tokens of PROMPTS computed from scratch, each on an empty cache."""
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(max_total_tokens=POOL, disable_radix_cache=True))
    try:
        return [run(engine, p).token_ids for p in PROMPTS]
    finally:
        engine.shutdown()


def test_same_tokens_from_device_host_disk_and_recomputation(make_engine, tmp_path, reference):
    engine = hicache(make_engine, tmp_path)
    p, want = PROMPTS[0], reference[0]
    first = run(engine, p)
    assert first.token_ids == want and first.cached_tokens == 0

    device = run(engine, p)
    assert device.cached_tokens_by_tier == {"device": 299, "host": 0, "disk": 0, "remote": 0}

    engine.cache_manager.radix_cache.evict(POOL)  # device -> host (write_through keeps a copy)
    host = run(engine, p)
    assert host.cached_tokens_by_tier == {"device": 0, "host": 299, "disk": 0, "remote": 0}

    engine.cache_manager.radix_cache.evict(POOL)
    engine.hicache.evict_host(10 * POOL)  # host -> gone; the disk still has it
    disk = run(engine, p)
    assert disk.cached_tokens_by_tier == {"device": 0, "host": 0, "disk": 256, "remote": 0}  # whole 64-token blocks

    # One request served by all three: its head on device, its middle on host, its tail on disk.
    engine.cache_manager.radix_cache.evict(POOL)
    engine.hicache.evict_host(10 * POOL)
    run(engine, p[:129] + [7])  # re-inserts the first 129 tokens...
    engine.cache_manager.radix_cache.evict(POOL)  # ...demotes them...
    run(engine, p[:65] + [7])  # ...and loads the first 65 back to the device
    mixed = run(engine, p)
    assert mixed.cached_tokens_by_tier == {"device": 65, "host": 64, "disk": 127, "remote": 0}
    for out in (first, device, host, disk, mixed):
        assert out.token_ids == want
    s = engine.stats()
    assert s["hicache_loaded_tokens_host"] >= 299 + 64 and s["hicache_loaded_tokens_disk"] >= 256 + 127
    assert s["cache_hit_tokens_disk"] >= 256 + 127 and s["hicache_disk_read_failures"] == 0
    assert s["prefix_cache_hits_by_tier"] == {
        t: s[f"cache_hit_tokens_{t}"] for t in ("device", "host", "disk", "remote")
    }
    assert sum(s["prefix_cache_hits_by_tier"].values()) == s["prefix_cache_hits"]
    assert s["hicache_bytes_used_device"] == (POOL - s["available_tokens"]) * 2048  # tiny: 2 KiB a token
    assert s["hicache_bytes_used_host"] == s["hicache_host_used_tokens"] * 2048 > 0


def test_pages_and_chunked_prefill_load_back_whole_pages(make_engine, tmp_path, reference):
    engine = hicache(make_engine, tmp_path, page_size=16, chunked_prefill_size=64)
    p = PROMPTS[2]
    first = run(engine, p)
    engine.cache_manager.radix_cache.evict(POOL)
    host = run(engine, p)
    engine.cache_manager.radix_cache.evict(POOL)
    engine.hicache.evict_host(10 * POOL)
    disk = run(engine, p)
    assert (host.cached_tokens_by_tier["host"], disk.cached_tokens_by_tier["disk"]) == (288, 256)
    assert first.token_ids == host.token_ids == disk.token_ids == reference[2]


def test_fp8_kv_moves_between_tiers_as_bytes(make_engine, tmp_path):
    engine = hicache(make_engine, tmp_path, kv_cache_dtype="fp8_e4m3")
    p = PROMPTS[0]
    first = run(engine, p)  # calibrates the scales, then writes the disk
    engine.cache_manager.radix_cache.evict(POOL)
    host = run(engine, p)
    engine.cache_manager.radix_cache.evict(POOL)
    engine.hicache.evict_host(10 * POOL)
    disk = run(engine, p)
    assert (host.cached_tokens_by_tier["host"], disk.cached_tokens_by_tier["disk"]) == (299, 256)
    assert first.token_ids == host.token_ids == disk.token_ids


def test_warm_restart_serves_from_disk(make_engine, tmp_path, reference):
    engine = hicache(make_engine, tmp_path)
    for p in PROMPTS:
        run(engine, p)
    engine.shutdown()  # finishes the queued disk writes
    restarted = hicache(make_engine, tmp_path)
    out = run(restarted, PROMPTS[1])
    assert out.cached_tokens == out.cached_tokens_by_tier["disk"] == 256
    assert out.token_ids == reference[1]
    assert restarted.stats()["hicache_disk_entries"] == 3 * 4


def test_damaged_disk_entries_are_counted_misses(make_engine, tmp_path, reference):
    engine = hicache(make_engine, tmp_path)
    for p in PROMPTS:
        run(engine, p)
    engine.shutdown()
    engine = hicache(make_engine, tmp_path)  # indexes the stored blocks
    store = engine.hicache.disk
    keys = [store.block_keys(p[:-1], None) for p in PROMPTS]
    data = bytearray(open(store.path(keys[0][1]), "rb").read())
    data[len(data) // 3] ^= 0x40
    open(store.path(keys[0][1]), "wb").write(bytes(data))  # flipped byte in block 1
    with open(store.path(keys[1][0]), "r+b") as f:
        f.truncate(1000)  # truncated block 0
    os.unlink(store.path(keys[2][2]))  # missing block 2

    outs = [run(engine, p) for p in PROMPTS]
    assert [o.cached_tokens_by_tier["disk"] for o in outs] == [64, 0, 128]
    assert [o.token_ids for o in outs] == reference
    assert engine.stats()["hicache_disk_read_failures"] == 3


_KILLED_ENGINE = textwrap.dedent("""
    import json, os, signal, sys
    from radixgate.engine import Engine, EngineConfig, SamplingParams
    real_replace, renames = os.replace, []
    def replace(src, dst):          # the third block's rename never happens: killed in between
        renames.append(dst)
        if len(renames) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)
    os.replace = replace
    engine = Engine(EngineConfig(max_total_tokens=1024, enable_hicache=True, hicache_storage_dir=sys.argv[1]))
    engine.generate(input_ids=[json.loads(sys.argv[2])], sampling=SamplingParams(max_new_tokens=1))
    engine.shutdown()               # waits for the queued writes
""")


def test_engine_killed_while_writing_to_disk_serves_only_complete_blocks(make_engine, tmp_path, reference, monkeypatch):
    monkeypatch.setenv("RADIXGATE_CACHE_SECRET", "the secret of this deployment")  # both processes: the same keys
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_ENGINE, str(tmp_path), json.dumps(PROMPTS[0])], capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    engine = hicache(make_engine, tmp_path)
    out = run(engine, PROMPTS[0])
    assert out.cached_tokens_by_tier["disk"] == 128  # blocks 0 and 1; block 2 died in tmp/
    assert out.token_ids == reference[0]
    assert engine.stats()["hicache_disk_read_failures"] == 0


def test_a_forged_disk_entry_is_a_counted_miss_and_the_answer_is_unchanged(make_engine, tmp_path, reference, forge):
    engine = hicache(make_engine, tmp_path)
    run(engine, PROMPTS[0], salt="tenant:victim")
    engine.shutdown()
    engine = hicache(make_engine, tmp_path)
    store = engine.hicache.disk
    key = store.block_keys(PROMPTS[0][:-1], "tenant:victim")[1]
    with open(store.path(key), "rb") as f:
        entry = f.read()
    with open(store.path(key), "wb") as f:
        f.write(forge(entry))  # random KV, the header kept, the SHA-256 recomputed
    out = run(engine, PROMPTS[0], salt="tenant:victim")
    assert out.cached_tokens_by_tier["disk"] == 64  # block 0; the forged block 1 and what follows recomputed
    assert out.token_ids == reference[0]
    assert engine.stats()["hicache_disk_read_failures"] == 1


def test_a_failing_disk_write_is_counted_and_logged(make_engine, tmp_path, reference, caplog):
    engine = hicache(make_engine, tmp_path)
    shutil.rmtree(tmp_path / "tmp")
    (tmp_path / "tmp").write_text("")  # the temporary folder is a file: every write fails, as on a full disk
    try:
        with caplog.at_level(logging.WARNING, logger="radixgate.engine.hicache.disk_tier"):
            assert run(engine, PROMPTS[1]).token_ids == reference[1]
            engine.hicache.drain()
    finally:
        os.unlink(tmp_path / "tmp")
        os.mkdir(tmp_path / "tmp")
    assert engine.stats()["hicache_disk_write_failures"] >= 4  # each of the 4 blocks, at least once
    logged = [r.getMessage() for r in caplog.records if r.name.endswith("disk_tier")]
    assert len(logged) == 1 and "writing a block" in logged[0], "one line per interval, not one per block"


def test_tenants_never_share_disk_entries(make_engine, tmp_path, reference):
    engine = hicache(make_engine, tmp_path)
    run(engine, PROMPTS[0], salt="tenant-a")
    engine.shutdown()
    engine = hicache(make_engine, tmp_path)
    assert run(engine, PROMPTS[0], salt="tenant-b").cached_tokens == 0
    assert run(engine, PROMPTS[0], salt="tenant-a").cached_tokens_by_tier["disk"] == 256


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
def test_write_policies_under_eviction(make_engine, tmp_path, reference, policy):
    engine = hicache(make_engine, tmp_path, hicache_write_policy=policy, max_total_tokens=512)
    s = engine.stats
    run(engine, PROMPTS[0])
    assert (s()["hicache_backup_tokens_host"] > 0) == (policy == "write_through")
    run(engine, PROMPTS[0])  # a hit: selective backs it up now
    backed = s()["hicache_backup_tokens_host"]
    assert (backed >= 299) == (policy != "write_back")
    outs = [run(engine, p) for p in PROMPTS + PROMPTS]  # 512-token device pool: each evicts the last
    assert [o.token_ids for o in outs] == reference + reference
    hits = [o.cached_tokens_by_tier["host"] for o in outs[3:]]
    # Selective drops what was never hit; the others demote everything to the (1024-token) host.
    assert hits == ([299, 0, 0] if policy == "write_through_selective" else [299, 299, 299])
    engine.hicache.drain()
    if policy == "write_back":  # the disk is written when the host evicts
        assert s()["hicache_backup_tokens_disk"] == 0
        engine.cache_manager.radix_cache.evict(POOL)
        engine.hicache.evict_host(10 * POOL)
        engine.hicache.drain()
        assert s()["hicache_backup_tokens_disk"] == 3 * 256
        assert run(engine, PROMPTS[2]).cached_tokens_by_tier["disk"] == 256
    else:
        assert s()["hicache_backup_tokens_disk"] == (256 if policy == "write_through_selective" else 3 * 256)


def test_config_is_validated():
    from radixgate.engine import EngineConfig

    with pytest.raises(ValueError, match="hicache_write_policy"):
        EngineConfig(enable_hicache=True, hicache_write_policy="sometimes")
    with pytest.raises(ValueError, match="radix cache"):
        EngineConfig(enable_hicache=True, disable_radix_cache=True)
    with pytest.raises(ValueError, match="hicache_ratio"):
        EngineConfig(enable_hicache=True, hicache_ratio=0)
