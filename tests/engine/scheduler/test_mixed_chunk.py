"""Mixed chunks: running requests decode inside a long prompt's prefill passes, with the same tokens."""

from __future__ import annotations

import dataclasses

import torch

from radixgate.engine import SamplingParams


def test_decodes_ride_along_prefill_chunks_and_tokens_do_not_change(make_engine):
    g = torch.Generator().manual_seed(3)
    short = [torch.randint(0, 100000, (n,), generator=g).tolist() for n in (7, 30)]
    long = torch.randint(0, 100000, (300,), generator=g).tolist()  # 5 chunks of 64
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    outputs, mixed_steps = {}, {}
    engine = make_engine(chunked_prefill_size=64)
    for mixed in (False, True):  # one engine, both modes: the cache is flushed in between
        engine.scheduler.config = dataclasses.replace(engine.config, enable_mixed_chunk=mixed)
        engine.flush_cache()
        before = engine.stats()["num_prefill_computed_tokens"]
        schedule = engine.scheduler.schedule
        seen = []

        def spy(schedule=schedule, seen=seen):
            batch = schedule()
            if batch is not None:
                seen.append(batch.num_decodes)
            return batch

        engine.scheduler.schedule = spy
        outputs[mixed] = [o.token_ids for o in engine.generate(input_ids=[*short, long], sampling=greedy)]
        mixed_steps[mixed] = sum(n > 0 for n in seen)
        engine.scheduler.schedule = schedule
        computed = engine.stats()["num_prefill_computed_tokens"] - before
        assert computed == 7 + 30 + 300  # decodes are not prefill
    assert mixed_steps[False] == 0
    assert mixed_steps[True] >= 4  # the short requests decoded during the long prompt's chunks
    assert outputs[True] == outputs[False]
