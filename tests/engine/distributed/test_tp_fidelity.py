"""TP=2 against TP=1 in float32 (two gloo ranks on the CPU): the same greedy tokens, logits within
1e-4, and warm (prefix-hit) equal to cold under TP=2, on the tiny model and random Llama-3 (GQA),
Qwen2 (attention bias) and Mistral (one KV head, replicated over the ranks) checkpoints."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from radixgate.bench.tp_fidelity import compare, fidelity_prompts, record_greedy
from radixgate.engine import Engine, EngineConfig, SamplingParams

pytestmark = pytest.mark.slow  # starts a rank process per model
NEW_TOKENS = 4


@pytest.fixture(scope="module", params=["tiny", "llama3_gqa", "qwen2_bias", "mistral"])
def engines(request, checkpoints):
    # chunked prefill on: prompts over 64 tokens run in chunks
    settings = dict(model_path=checkpoints[request.param], max_total_tokens=8192, chunked_prefill_size=64)
    listening = _listening()
    with ThreadPoolExecutor(1) as pool:  # TP=1 loads while the rank process starts (imports torch)
        starting = pool.submit(Engine, EngineConfig(tp_size=2, **settings))
        tp1 = Engine(EngineConfig(**settings))
        tp2 = starting.result()
    # the ranks meet on loopback only: the group's store and gloo's pairs listen on 127.0.0.1
    opened = {addr.ip for addr in _listening() - listening}
    assert opened and opened <= {"127.0.0.1", "::ffff:127.0.0.1"}, opened
    yield request.param, tp1, tp2
    ranks = [psutil.Process(p.pid) for p in tp2.tensor_parallel.processes]
    try:
        tp1.check_idle_invariant()
        tp2.check_idle_invariant()
    finally:
        tp1.shutdown()
        tp2.shutdown()
    # shutdown leaves no rank process and no listening socket (the group's store) behind
    assert not [p for p in ranks if p.is_running()] and _listening() <= listening


def _listening() -> set:
    return {c.laddr for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN}


def test_tp2_matches_tp1_and_warm_matches_cold(engines):
    name, tp1, tp2 = engines
    prompts = fidelity_prompts(32, seed=7)
    cold = record_greedy(tp2, prompts, NEW_TOKENS)
    row = compare(name, record_greedy(tp1, prompts, NEW_TOKENS), cold)
    assert row.excluded <= len(prompts) // 10, row
    assert row.token_match == row.compared, row
    assert row.max_logit_diff <= 1e-4, row
    assert tp2.stats()["tp_size"] == 2 and tp2.stats()["kv_heads_per_rank"] * 2 >= tp1.stats()["kv_heads_per_rank"]
    greedy = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    warm = tp2.generate(input_ids=prompts, sampling=greedy)  # every prompt's prefix is cached now
    assert all(o.cached_tokens >= len(p) - 1 for o, p in zip(warm, prompts, strict=True))
    assert [o.token_ids for o in warm] == [tokens for tokens, _ in cold]
