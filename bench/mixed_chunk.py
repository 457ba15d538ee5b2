"""`radixgate bench mixed-chunk`: inter-token latency of running streams while long prompts arrive,
with and without mixed chunks (`enable_mixed_chunk`), at the same `chunked_prefill_size`.

Workload: `--streams` requests of 128-token prompts decode `--stream-tokens` tokens each; once all
are decoding, `--long-prompts` prompts of `--long-len` tokens arrive in pairs, `--gap-steps` engine
steps apart. Without mixed chunks every prefill chunk runs alone and the streams wait for all of
them; with mixed chunks each chunk's forward pass also carries one token of every stream.
Printed per mode: inter-token latency p50 / p99 / max of the streams (the gaps between a stream's
consecutive tokens), the stall count (gaps over 5x the median), and throughput (prompt plus output
tokens over the workload's wall time)."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

import torch


def run(mixed: bool, args: argparse.Namespace) -> dict[str, Any]:
    from radixgate.engine.config import EngineConfig, SamplingParams
    from radixgate.engine.engine import Engine

    engine = Engine(EngineConfig(enable_mixed_chunk=mixed, chunked_prefill_size=args.chunked_prefill_size))
    rng = random.Random(0)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(1000, 50000) for _ in range(n)]

    warm = SamplingParams(max_new_tokens=2, temperature=0.0, ignore_eos=True)
    engine.generate(input_ids=[prompt(64)], sampling=warm)
    stream_params = SamplingParams(max_new_tokens=args.stream_tokens, temperature=0.0, ignore_eos=True)
    long_params = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
    streams = [engine._make_req(prompt(128), stream_params, None, None, None) for _ in range(args.streams)]
    longs = [engine._make_req(prompt(args.long_len), long_params, None, None, None) for _ in range(args.long_prompts)]
    for req in streams:
        engine._add(req)
    token_times: list[list[float]] = [[] for _ in streams]
    start = time.perf_counter()
    step, arrived = 0, 0
    decoding_since: int | None = None
    while any(r.result is None for r in streams + longs):
        if decoding_since is None and all(r.output_ids for r in streams):
            decoding_since = step
        due = (
            decoding_since is not None
            and arrived < len(longs)
            and step >= decoding_since + arrived // 2 * args.gap_steps
        )
        if due:
            for req in longs[arrived : arrived + 2]:
                engine._add(req)
            arrived += 2
        engine.step()
        step += 1
        now = time.perf_counter()
        for times, req in zip(token_times, streams, strict=True):
            times.extend([now] * (len(req.output_ids) - len(times)))
    elapsed = time.perf_counter() - start
    engine.check_idle_invariant()
    engine.shutdown()
    gaps = sorted(b - a for times in token_times for a, b in zip(times, times[1:], strict=False))
    median = gaps[len(gaps) // 2]
    tokens = sum(len(r.origin_input_ids) + len(r.output_ids) for r in streams + longs)
    return {
        "mixed": mixed,
        "itl_p50_ms": 1e3 * median,
        "itl_p99_ms": 1e3 * gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))],
        "itl_max_ms": 1e3 * gaps[-1],
        "stalls": sum(g > 5 * median for g in gaps),
        "tokens_per_s": tokens / elapsed,
        "elapsed_s": elapsed,
        "outputs": [list(r.output_ids) for r in streams],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixgate bench mixed-chunk", description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--stream-tokens", type=int, default=48)
    parser.add_argument("--long-prompts", type=int, default=4, help="arrive in pairs")
    parser.add_argument("--long-len", type=int, default=4096)
    parser.add_argument("--gap-steps", type=int, default=10, help="engine steps between the pairs' arrivals")
    parser.add_argument("--chunked-prefill-size", type=int, default=2048)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from radixgate.engine.config import num_threads

    if num_threads():
        torch.set_num_threads(num_threads())
    off, on = run(False, args), run(True, args)
    same = off.pop("outputs") == on.pop("outputs")
    report = {
        "separate": off,
        "mixed": on,
        "itl_p99_ratio": off["itl_p99_ms"] / on["itl_p99_ms"],
        "throughput_ratio": on["tokens_per_s"] / off["tokens_per_s"],
        "same_tokens": same,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{args.streams} streams x {args.stream_tokens} tokens; {args.long_prompts} prompts of {args.long_len} "
        f"tokens arriving in pairs; chunked_prefill_size {args.chunked_prefill_size}; {torch.get_num_threads()} threads"
    )
    print(f"{'':<10}{'ITL p50 ms':>11}{'p99 ms':>9}{'max ms':>9}{'stalls':>8}{'tokens/s':>10}{'wall s':>8}")
    for name in ("separate", "mixed"):
        r = report[name]
        print(
            f"{name:<10}{r['itl_p50_ms']:>11.1f}{r['itl_p99_ms']:>9.1f}{r['itl_max_ms']:>9.1f}{r['stalls']:>8}"
            f"{r['tokens_per_s']:>10.0f}{r['elapsed_s']:>8.1f}"
        )
    print(
        f"ITL p99: {report['itl_p99_ratio']:.2f}x lower with mixed chunks; "
        f"throughput {report['throughput_ratio']:.2f}x; stream tokens identical: {same}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
