"""HiCache at TP=2 (two gloo ranks on the CPU): each rank spills its own KV heads to its own host pool
and disk files and loads them back into the same slots, a disk block that one rank cannot read is a
miss on every rank, the logits equal TP=1's without HiCache, and a rank that dies fails the engine."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import torch

from radixgate.bench.tp_fidelity import compare, record_greedy
from radixgate.engine import Engine, EngineConfig
from radixgate.engine.hicache.block_format import kv_fingerprint, rank_key
from radixgate.engine.kvcache.kv_pool import KVPool

POOL = 512  # device tokens: each 300-token prompt pushes the one before out to the host
rng = random.Random(3)
PROMPTS = [[rng.randrange(1000, 50000) for _ in range(300)] for _ in range(2)]


def test_the_disk_fingerprint_names_tp_size_and_rank(tiny_path):
    pool = KVPool(16, 2, 1, 32, torch.float32, "cpu")
    prints = {kv_fingerprint(tiny_path, pool, tp, rank) for tp, rank in [(1, 0), (2, 0), (2, 1), (4, 1)]}
    assert len(prints) == 4
    assert len({rank_key(f, "0" * 64) for f in prints}) == 4


@pytest.mark.slow  # starts a rank process
def test_tp2_hicache_loads_each_ranks_heads_from_host_and_disk(tmp_path):
    hicache = dict(enable_hicache=True, hicache_ratio=2.0, hicache_storage_dir=str(tmp_path))

    with ThreadPoolExecutor(1) as starter:  # TP=1 loads while the rank process starts
        starting = starter.submit(Engine, EngineConfig(tp_size=2, max_total_tokens=POOL, **hicache))
        tp1 = Engine(EngineConfig(max_total_tokens=POOL, disable_radix_cache=True))
        tp2 = starting.result()
    ranks = [psutil.Process(p.pid) for p in tp2.tensor_parallel.processes]
    try:
        want = [record_greedy(tp1, [p], 6)[0] for p in PROMPTS]

        def run(i: int) -> dict[str, int]:
            """Prompt i's tokens served from each tier, once its logits are checked against TP=1's."""
            before = tp2.stats()["prefix_cache_hits_by_tier"]
            row = compare("tiny", [want[i]], record_greedy(tp2, [PROMPTS[i]], 6))
            assert row.max_logit_diff <= 1e-4 and row.token_match == row.compared, row
            return {tier: n - before[tier] for tier, n in tp2.stats()["prefix_cache_hits_by_tier"].items()}

        def evict_device_and_host() -> None:
            tp2.cache_manager.radix_cache.evict(POOL)
            tp2.hicache.evict_host(10 * POOL)
            tp2.hicache.drain()  # rank 0's disk writes are done; each rank's read waits for its own

        run(0)
        run(1)
        assert run(0)["host"] >= 290  # prompt 1 pushed it out of the device pool: loaded back on both ranks
        assert tp2.stats()["hicache_loaded_tokens_host"] >= 290
        evict_device_and_host()
        assert run(1)["disk"] == 256  # whole 64-token blocks, from each rank's own files
        assert tp2.stats()["hicache_loaded_tokens_disk"] >= 256
        assert sorted(os.listdir(tmp_path)) == ["tp2-rank0", "tp2-rank1"]

        evict_device_and_host()
        for folder, _, files in os.walk(tmp_path / "tp2-rank1"):  # rank 1 cannot read any block now
            for name in files:
                with open(os.path.join(folder, name), "r+b") as f:
                    f.truncate(100)
        assert run(0) == {"device": 0, "host": 0, "disk": 0, "remote": 0}  # rank 0's blocks too: recomputed on both
        tp2.check_idle_invariant()

        evict_device_and_host()  # a rank that dies fails the next tier move loudly, naming it
        rank1 = tp2.tensor_parallel.processes[0]
        rank1.kill()
        rank1.join(10)
        with pytest.raises(RuntimeError, match="rank 1 .* died"):
            tp2.generate(input_ids=[PROMPTS[1]])
    finally:
        tp1.shutdown()
        tp2.shutdown()
    assert not [p for p in ranks if p.is_running()]
