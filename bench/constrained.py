"""`radixgate bench constrained`: what constrained decoding costs. The engine in-process, one batch
of requests sampled at temperature 1.0, with no constraint and then with a JSON schema, on the same
prompts and the same number of output tokens per request; prints tokens/s of each and the ratio.

The schema (at least `--output-len` notes, each a string) cannot end before `--output-len`, so both
runs generate the same tokens in the same batch shape and only the grammar's work differs: filling
one bitmask row per request, applying the masks to the batch's logits, advancing each matcher.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from radixgate.engine.config import EngineConfig, SamplingParams
from radixgate.engine.engine import Engine


def notes_schema(min_items: int) -> dict:
    """A list of at least `min_items` strings: at two tokens or more per item, no output of
    `min_items` tokens can complete it, so every constrained request runs to its length."""
    return {
        "type": "object",
        "properties": {"notes": {"type": "array", "items": {"type": "string"}, "minItems": min_items}},
        "required": ["notes"],
    }


def _run(engine: Engine, prompts: list[list[int]], sampling: list[SamplingParams]) -> tuple[float, int, dict[str, int]]:
    start = time.perf_counter()
    outs = engine.generate(input_ids=prompts, sampling=sampling)
    seconds = time.perf_counter() - start
    reasons: dict[str, int] = {}
    for out in outs:
        reasons[out.finish_reason] = reasons.get(out.finish_reason, 0) + 1
    return seconds, sum(len(o.token_ids) for o in outs), reasons


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="radixgate bench constrained", description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds of each; the best of each counts")
    p.add_argument("--model-path", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args(argv)

    engine = Engine(EngineConfig(model_path=args.model_path, device=args.device, max_total_tokens=65536))
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 90000) for _ in range(args.prompt_len)] for _ in range(args.batch_size)]
    schema = json.dumps(notes_schema(args.output_len))
    free = [
        SamplingParams(max_new_tokens=args.output_len, temperature=1.0, seed=i, ignore_eos=True)
        for i in range(args.batch_size)
    ]
    constrained = [
        SamplingParams(max_new_tokens=args.output_len, temperature=1.0, seed=i, json_schema=schema)
        for i in range(args.batch_size)
    ]
    engine.generate(input_ids=prompts, sampling=[SamplingParams(max_new_tokens=4, json_schema=schema)] * len(prompts))
    best: dict[str, tuple[float, int, dict[str, int]]] = {}
    for _ in range(args.rounds):
        for name, sampling in (("unconstrained", free), ("json_schema", constrained)):
            engine.flush_cache()
            seconds, tokens, reasons = _run(engine, prompts, sampling)
            if name not in best or tokens / seconds > best[name][1] / best[name][0]:
                best[name] = (seconds, tokens, reasons)
    engine.shutdown()

    rates = {name: tokens / seconds for name, (seconds, tokens, _) in best.items()}
    ratio = rates["json_schema"] / rates["unconstrained"]
    if args.json:
        print(json.dumps({"batch_size": args.batch_size, "tokens_per_s": rates, "ratio": ratio}))
        return 0
    print(f"batch {args.batch_size}, {args.output_len} output tokens per request, temperature 1.0, {args.device}")
    print(f"{'run':<15} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}  finish reasons")
    for name, (seconds, tokens, reasons) in best.items():
        print(f"{name:<15} {tokens:>7} {seconds:>8.2f} {tokens / seconds:>9.1f}  {reasons}")
    print(f"ratio (json_schema / unconstrained): {ratio:.3f}")
    return 0
