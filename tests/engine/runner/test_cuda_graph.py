"""The decode graph runner's static buffers and padding, run eagerly on CPU (capture=False): the
same path a CUDA graph records, minus the recording. Capture itself runs in scripts/gpu_check.sh."""

from __future__ import annotations

import pytest

from radixgate.engine import Engine, EngineConfig, SamplingParams
from radixgate.engine.runner.cuda_graph import DecodeGraphRunner, capture_batch_sizes


def test_capture_ladder_is_sglangs():
    assert capture_batch_sizes(1) == [1]
    assert capture_batch_sizes(6) == [1, 2, 4, 6]
    assert capture_batch_sizes(32) == [1, 2, 4, 8, 16, 24, 32]
    assert capture_batch_sizes(36) == [1, 2, 4, 8, 16, 24, 32, 36]


def test_graph_options_are_checked():
    with pytest.raises(ValueError, match="needs a CUDA device"):
        EngineConfig(cuda_graph_max_bs=8)
    with pytest.raises(ValueError, match="at least 1"):
        EngineConfig(device="cuda", cuda_graph_max_bs=0)
    with pytest.raises(ValueError, match="drop one"):
        EngineConfig(device="cuda", cuda_graph_max_bs=8, disable_cuda_graph=True)


PROMPTS = [f"Request {i}: list three facts about the number {i * 7}." for i in range(5)]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def engine():
    engine = Engine(EngineConfig(max_total_tokens=4096))
    assert engine.stats()["cuda_graph"] == "off: not a CUDA device"
    yield engine
    engine.shutdown()


@pytest.mark.parametrize("count", [3, 5])  # padded to 4 and to 8
def test_padded_static_decode_matches_eager(engine, count):
    expected = [o.token_ids for o in engine.generate(PROMPTS[:count], sampling=GREEDY)]
    engine.flush_cache()
    allocator = engine.cache_manager.allocator
    scratch_page = allocator.allocate(1)
    runner = DecodeGraphRunner(
        engine.runner.model,
        engine.runner.backend,
        engine.pool,
        max_bs=8,
        max_context_len=engine.context_len + 1,
        scratch_slot=allocator.slots_of(scratch_page)[0],
        capture=False,
    )
    engine.runner.decode_graphs = runner
    try:
        got = [o.token_ids for o in engine.generate(PROMPTS[:count], sampling=GREEDY)]
    finally:
        engine.runner.decode_graphs = None
        allocator.free(scratch_page)
    assert got == expected
    assert runner.num_runs >= GREEDY.max_new_tokens - 1  # every decode step went through the buffers
    engine.check_idle_invariant()


def test_batches_over_the_buffers_run_eagerly(engine):
    runner = DecodeGraphRunner(
        engine.runner.model, engine.runner.backend, engine.pool, 2, engine.context_len + 1, 0, capture=False
    )
    assert runner.padded_size(2) == 2 and runner.padded_size(3) is None
    assert not runner.can_run(3, 30)
    assert runner.can_run(2, runner.kv_capacity) and not runner.can_run(2, runner.kv_capacity + 1)
    assert runner.can_run(1, 100)
