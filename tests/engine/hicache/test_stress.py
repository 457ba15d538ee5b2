"""Eviction, backup and load-back interleaved with random aborts, from concurrent streams: afterwards
every tier balances its books (the make_engine fixture checks the idle invariant, all tiers)."""

from __future__ import annotations

import asyncio
import random

from radixgate.engine import SamplingParams


def test_concurrent_streams_with_random_aborts_leave_every_tier_balanced(make_engine, tmp_path):
    engine = make_engine(
        max_total_tokens=1024,
        enable_hicache=True,
        hicache_ratio=1.5,
        hicache_storage_dir=str(tmp_path),
        max_running_requests=6,
    )
    rng = random.Random(5)
    bases = [[rng.randrange(1000, 50000) for _ in range(200)] for _ in range(8)]
    tails = [[rng.randrange(1000, 50000) for _ in range(rng.choice([16, 70]))] for _ in range(3)]
    jobs = [(rng.randrange(8), rng.randrange(3), rng.random()) for _ in range(40)]
    done: dict[tuple[int, int], list[list[int]]] = {}

    async def one(i: int, base: int, tail: int, fate: float) -> None:
        ids = bases[base] + tails[tail]
        rid = f"stress-{i}"
        stream = engine.stream(
            input_ids=ids, rid=rid, sampling=SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
        )
        if fate < 0.15:  # aborted by id from another thread, likely while queued
            first = asyncio.ensure_future(stream.__anext__())
            await asyncio.get_running_loop().run_in_executor(None, engine.abort, rid)
            try:
                await first
            finally:
                await stream.aclose()
            return
        tokens: list[int] = []
        async for delta in stream:
            tokens += delta.token_ids
            if fate < 0.35 and len(tokens) >= int(fate * 10):
                break  # the client went away: closing the stream aborts it
            if delta.finished and delta.output.finish_reason == "length":
                done.setdefault((base, tail), []).append(delta.output.token_ids)

    async def main() -> None:
        gate = asyncio.Semaphore(8)

        async def gated(*job):
            async with gate:
                await one(*job)

        await asyncio.wait_for(asyncio.gather(*(gated(i, *job) for i, job in enumerate(jobs))), timeout=120)

    asyncio.run(main())
    assert done, "some requests must complete"
    for outs in done.values():
        assert all(o == outs[0] for o in outs), "greedy tokens must not depend on the tier a prefix came from"
    s = engine.stats()
    assert s["hicache_backup_tokens_host"] > 0 and s["hicache_backup_tokens_disk"] > 0, s
    assert s["evictable_tokens"] + s["available_tokens"] == s["max_total_num_tokens"]

    # Then, on the same engine and whatever the streams left in its tiers, one request at a time with
    # the background copies drained after each: which tier serves a prefix no longer depends on timing.
    fresh = [[rng.randrange(1000, 50000) for _ in range(250)] for _ in range(14)]
    greedy = SamplingParams(max_new_tokens=2, temperature=0.0, ignore_eos=True)

    def run(i: int):
        out = engine.generate(input_ids=[fresh[i]], sampling=greedy)[0]
        engine.hicache.drain()
        return out

    first = [run(i) for i in range(6)]  # the device holds 1024 tokens: fresh[0] is out of it, still on the host
    loaded = engine.stats()
    from_host = run(0)
    assert from_host.cached_tokens_by_tier == {"device": 0, "host": 249, "disk": 0, "remote": 0}
    assert from_host.token_ids == first[0].token_ids
    for i in range(6, 14):  # 2000 more tokens than the host's 1536: fresh[1] is left on the disk only
        run(i)
    from_disk = run(1)
    assert from_disk.cached_tokens_by_tier == {"device": 0, "host": 0, "disk": 192, "remote": 0}  # 3 whole blocks
    assert from_disk.token_ids == first[1].token_ids
    after = engine.stats()
    assert after["hicache_loaded_tokens_host"] - loaded["hicache_loaded_tokens_host"] == 249
    assert after["hicache_loaded_tokens_disk"] - loaded["hicache_loaded_tokens_disk"] == 192
