"""`radixgate bench tp`: tensor parallelism on this machine, TP=1 against TP=N.

1. Throughput: the tiny model, a batch of prompts, prefill tokens/s (one new token each) and decode
   tokens/s (the rest of the run), with the radix cache flushed between runs. On a CPU the ranks
   share the cores, so TP=2 gains little or loses: the point here is correctness; the speed is a
   GPU's (each rank's device reads half the weights and half the KV).
2. Retraction in a pool too small for the batch, float32 and FP8 KV.
3. Fidelity (bench/tp_fidelity.py): per model, greedy tokens and logits of TP=N against TP=1 in
   float32: prompts, compared, excluded (top-2 margin under 1e-3), max |logit difference|, token match.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from radixgate.bench.tp_fidelity import (
    CHECKPOINT_SHAPES,
    HEADER,
    compare,
    fidelity_prompts,
    record_greedy,
    write_checkpoints,
)
from radixgate.engine import Engine, EngineConfig, SamplingParams
from radixgate.engine.config import num_threads


def throughput(tp_size: int, num_prompts: int, prompt_len: int, new_tokens: int, device: str) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) of the tiny model at `tp_size`."""
    tokens = num_prompts * (prompt_len + new_tokens) + 64
    engine = Engine(EngineConfig(tp_size=tp_size, max_total_tokens=tokens, device=device))
    try:
        g = torch.Generator().manual_seed(tp_size)
        prompts = [torch.randint(0, 100000, (prompt_len,), generator=g).tolist() for _ in range(num_prompts)]
        engine.generate(input_ids=prompts[:1], sampling=SamplingParams(max_new_tokens=2))  # warm-up
        engine.flush_cache()
        start = time.perf_counter()
        engine.generate(input_ids=prompts, sampling=SamplingParams(max_new_tokens=1, temperature=0.0))
        prefill_s = time.perf_counter() - start
        engine.flush_cache()
        greedy = SamplingParams(max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)
        start = time.perf_counter()
        engine.generate(input_ids=prompts, sampling=greedy)
        decode_s = max(time.perf_counter() - start - prefill_s, 1e-9)
        return num_prompts * prompt_len / prefill_s, num_prompts * (new_tokens - 1) / decode_s
    finally:
        engine.shutdown()


def retraction(tp_size: int, device: str) -> tuple[str, bool]:
    """Six 50-token prompts, 24 greedy tokens each, in a 200-token pool: TP=N retracts and resumes,
    and its tokens still equal TP=1's with room to spare (float32) and its own one-at-a-time run."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 100000, (50,), generator=g).tolist() for _ in range(6)]
    greedy = SamplingParams(max_new_tokens=24, temperature=0.0, ignore_eos=True)
    lines, ok = [], True
    roomy = Engine(EngineConfig(max_total_tokens=16384, device=device))
    reference = [o.token_ids for o in roomy.generate(input_ids=prompts, sampling=greedy)]
    roomy.shutdown()
    for kv in ("auto", "fp8_e4m3"):
        config = EngineConfig(
            tp_size=tp_size, max_total_tokens=200, disable_radix_cache=True, kv_cache_dtype=kv, device=device
        )
        tight = Engine(config)
        try:
            outs = [o.token_ids for o in tight.generate(input_ids=prompts, sampling=greedy)]
            alone = [tight.generate(input_ids=[p], sampling=greedy)[0].token_ids for p in prompts]
            tight.check_idle_invariant()
            ok = ok and outs == alone and (kv != "auto" or outs == reference)
            lines.append(
                f"kv {kv:<9} TP={tp_size}, 200-token pool: retracted {tight.stats()['num_retracted_reqs']}, tokens "
                f"= TP=1 with room {outs == reference}, = its own one-at-a-time run {outs == alone}"
            )
        finally:
            tight.shutdown()
    return "\n".join(lines), ok


def fidelity(models: list[str], tp_size: int, num_prompts: int, new_tokens: int, root: str, device: str) -> list:
    from transformers import AutoTokenizer

    from radixgate.engine.models.tiny import ensure_tiny_checkpoint

    tiny = ensure_tiny_checkpoint()
    unknown = sorted(set(models) - {"tiny", *CHECKPOINT_SHAPES})
    if unknown:
        raise SystemExit(f"unknown models {unknown}: choose from tiny, {', '.join(CHECKPOINT_SHAPES)}")
    others = [m for m in models if m != "tiny"]
    paths = {"tiny": tiny, **(write_checkpoints(root, AutoTokenizer.from_pretrained(tiny), others) if others else {})}
    prompts = fidelity_prompts(num_prompts, seed=7)
    rows = []
    for name in models:
        settings = dict(model_path=paths[name], max_total_tokens=8192, chunked_prefill_size=64, device=device)
        reference_engine = Engine(EngineConfig(**settings))
        reference = record_greedy(reference_engine, prompts, new_tokens)
        reference_engine.shutdown()
        engine = Engine(EngineConfig(tp_size=tp_size, **settings))
        try:
            rows.append(compare(name, reference, record_greedy(engine, prompts, new_tokens)))
        finally:
            engine.shutdown()
        print(rows[-1].line(), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="radixgate bench tp", description=__doc__.split("\n\n")[0])
    p.add_argument("--tp-size", type=int, default=2)
    p.add_argument("--batch", type=int, default=8, help="prompts in the throughput runs")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--models", default="tiny,llama3_gqa,qwen2,mistral", help="fidelity models, comma-separated")
    p.add_argument("--prompts", type=int, default=32, help="fidelity prompts per model")
    p.add_argument("--new-tokens", type=int, default=8, help="greedy tokens per fidelity prompt")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-retraction", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu (gloo ranks) or cuda (one GPU per rank, NCCL)")
    args = p.parse_args(argv)
    retraction_ok = True
    threads = num_threads() or torch.get_num_threads()
    print(f"machine: {os.cpu_count()} CPU cores, {threads} torch thread(s) per rank; {args.device}, float32")
    if not args.skip_throughput:
        print(f"\nthroughput: batch {args.batch} x {args.prompt_len}-token prompts, {args.decode_tokens} new tokens")
        print(f"{'ranks':<7} {'prefill tok/s':>14} {'decode tok/s':>13}")
        for tp in (1, args.tp_size):
            prefill, decode = throughput(tp, args.batch, args.prompt_len, args.decode_tokens, args.device)
            print(f"{f'TP={tp}':<7} {prefill:>14.0f} {decode:>13.1f}", flush=True)
    if not args.skip_retraction:
        print("\nretraction (6 x 50-token prompts, 24 greedy tokens; FP8 scales differ per rank, so FP8 is compared")
        print("with itself):")
        text, retraction_ok = retraction(args.tp_size, args.device)
        print(text, flush=True)
    print(f"\nfidelity: TP={args.tp_size} vs TP=1, float32, {args.new_tokens} greedy tokens per prompt")
    print(HEADER)
    with tempfile.TemporaryDirectory(prefix="radixgate-tp-") as root:
        rows = fidelity(args.models.split(","), args.tp_size, args.prompts, args.new_tokens, root, args.device)
    return 0 if retraction_ok and all(row.passed for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
