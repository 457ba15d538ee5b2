"""Priority scheduling: admission order by priority (either direction), the aging bound counted in
scheduler steps, the refusal without the flag, and the `priority` eviction policy keeping the
prefixes of high-priority requests. No timed assertion: everything is counted in steps or tokens."""

from __future__ import annotations

import pytest

from radixgate.engine import EngineConfig, SamplingParams
from radixgate.engine.kvcache.slot_table import SlotTable
from radixgate.engine.scheduler.cache_manager import CacheManager
from radixgate.engine.scheduler.request import Req
from radixgate.engine.scheduler.scheduler import Scheduler


def _scheduler(**config) -> Scheduler:
    cfg = EngineConfig(max_total_tokens=4096, max_running_requests=1, enable_priority_scheduling=True, **config)
    slots = SlotTable(cfg.max_running_requests, 256, "cpu")
    cm = CacheManager.from_config(cfg, 4096, slots, None)
    return Scheduler(cfg, cm, frozenset(), 256)


def _req(rid: str, priority: int, base: int) -> Req:
    return Req(rid, [base + i for i in range(8)], SamplingParams(max_new_tokens=1, priority=priority))


def _admit_one(sched: Scheduler) -> str:
    """One step with room for one request: the one admitted, then taken out as if it had finished."""
    batch = sched.schedule()
    assert batch is not None and len(batch.reqs) == 1
    req = batch.reqs[0]
    sched.remove(req)
    return req.rid


@pytest.mark.parametrize("low_first", [False, True])
def test_admission_follows_priority_then_arrival(low_first: bool) -> None:
    sched = _scheduler(schedule_low_priority_values_first=low_first)
    for i, (rid, p) in enumerate([("p0", 0), ("p5a", 5), ("p1", 1), ("p5b", 5), ("neg", -2)]):
        sched.add(_req(rid, p, 100 * (i + 1)))
    order = [_admit_one(sched) for _ in range(5)]
    if low_first:  # vLLM's order: lower first, arrival among equals
        assert order == ["neg", "p0", "p1", "p5a", "p5b"]
    else:  # SGLang's: higher first
        assert order == ["p5a", "p5b", "p1", "p0", "neg"]
    sched.cache_manager.check_idle_invariant()


@pytest.mark.parametrize("aging_steps", [1, 4, 16])
def test_aging_admits_a_low_priority_request_within_the_bound(aging_steps: int) -> None:
    """A priority-0 request behind a fresh priority-2 arrival every step is admitted exactly when its
    aging catches up: once it has waited (2 - 0) * priority_aging_steps steps, never later."""
    sched = _scheduler(priority_aging_steps=aging_steps)
    sched.add(_req("low", 0, 10))
    sched.add(_req("high-0", 2, 1000))
    admitted_at = None
    for step in range(1, 200):
        rid = _admit_one(sched)
        if rid == "low":
            admitted_at = step
            break
        sched.add(_req(f"high-{step}", 2, 1000 + 10 * step))
    assert admitted_at == 2 * aging_steps + 1  # waited 2 * aging_steps steps, admitted on the next


def test_without_aging_in_reach_the_flood_keeps_it_waiting() -> None:
    """The same flood with aging too slow to matter within the run: the bound above is aging's doing."""
    sched = _scheduler(priority_aging_steps=10_000)
    sched.add(_req("low", 0, 10))
    sched.add(_req("high-0", 2, 1000))
    for step in range(1, 60):
        assert _admit_one(sched) != "low"
        sched.add(_req(f"high-{step}", 2, 1000 + 10 * step))
    assert "low" in [r.rid for r in sched.waiting]


def test_a_priority_without_the_flag_is_refused_naming_the_fix(make_engine) -> None:
    engine = make_engine(max_total_tokens=512)
    with pytest.raises(ValueError, match="priority=3 needs priority scheduling.*--enable-priority-scheduling"):
        engine.generate(input_ids=[[1, 2, 3]], sampling=SamplingParams(max_new_tokens=1, priority=3))
    engine.generate(input_ids=[[1, 2, 3]], sampling=SamplingParams(max_new_tokens=1, priority=0))


@pytest.mark.parametrize("policy,kept", [("priority", True), ("lru", False)])
def test_the_priority_policy_keeps_a_high_priority_prefix_through_a_flood(make_engine, policy, kept) -> None:
    engine = make_engine(
        max_total_tokens=256, radix_eviction_policy=policy, enable_priority_scheduling=True, max_running_requests=4
    )
    greedy = dict(max_new_tokens=1, temperature=0.0)
    vip = [7000 + i for i in range(64)]
    engine.generate(input_ids=[vip + [1]], sampling=SamplingParams(priority=9, **greedy))
    for k in range(6):  # 6 x 65 tokens of low-priority traffic through a 256-token pool
        engine.generate(input_ids=[[20000 + 100 * k + i for i in range(64)] + [2]], sampling=SamplingParams(**greedy))
    again = engine.generate(input_ids=[vip + [3]], sampling=SamplingParams(priority=9, **greedy))[0]
    assert (again.cached_tokens == 64) is kept
