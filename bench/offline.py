"""`radixgate bench offline`: the engine in-process, every configuration measured side by side in one run.

1. A shared-prefix workload shaped like SGLang's `generated-shared-prefix`: throughput and mean TTFT
   with the radix cache, with `disable_radix_cache`, and with Hugging Face `generate` one request at
   a time (on a subset; throughput is a rate, so the subset measures it).
2. The radix tree alone: match + insert per second, and under each eviction policy (evicting, CPU
   time) as a ratio of lru's.
3. TTFT of a long prompt, cold and fully cached.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import dataclass

from radixgate.engine.config import EngineConfig, SamplingParams
from radixgate.engine.engine import Engine
from radixgate.engine.kvcache.eviction import EVICTION_POLICIES
from radixgate.engine.kvcache.radix_cache import RadixCache

from .trace import tree_speed

_TOKEN_RANGE = (1000, 90000)  # ordinary BPE tokens of the tiny model's vocabulary


@dataclass
class Row:
    name: str
    requests: int
    seconds: float
    output_tokens: int
    mean_ttft_s: float

    @property
    def output_throughput(self) -> float:
        return self.output_tokens / self.seconds

    @property
    def request_throughput(self) -> float:
        return self.requests / self.seconds


def gsp_prompts(groups: int, per_group: int, system_len: int, question_len: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)

    def tok(n: int) -> list[int]:
        return [rng.randrange(*_TOKEN_RANGE) for _ in range(n)]

    prompts = []
    for _ in range(groups):
        system = tok(system_len)
        prompts += [system + tok(question_len) for _ in range(per_group)]
    rng.shuffle(prompts)  # groups interleave, as independent users' requests would
    return prompts


# Throughput is timed in wall time by default; `--clock cpu` reads this process's CPU time instead
# (with --threads 1 on a machine shared with other work: load then inflates neither side). TTFTs
# stay in wall time.
_clock = time.perf_counter


def run_engine(name: str, config: EngineConfig, prompts: list[list[int]], output_len: int) -> Row:
    engine = Engine(config)
    sampling = SamplingParams(max_new_tokens=output_len, temperature=0.0, ignore_eos=True)
    engine.generate(input_ids=[prompts[0][:16]], sampling=SamplingParams(max_new_tokens=2))  # warm-up
    engine.flush_cache()
    start = _clock()
    outs = engine.generate(input_ids=prompts, sampling=sampling)
    seconds = _clock() - start
    ttft = sum(o.times["first_token"] - o.times["arrival"] for o in outs) / len(outs)
    engine.check_idle_invariant()
    engine.shutdown()
    return Row(name, len(prompts), seconds, sum(len(o.token_ids) for o in outs), ttft)


def run_hf(path: str, prompts: list[list[int]], output_len: int) -> Row:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.generation.streamers import BaseStreamer

    class FirstToken(BaseStreamer):
        def __init__(self):
            self.calls, self.first = 0, None

        def put(self, value):
            self.calls += 1
            if self.calls == 2:  # the first call carries the prompt
                self.first = time.perf_counter()

        def end(self):
            pass

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ttfts, tokens = [], 0
    start = _clock()
    with torch.no_grad():
        for ids in prompts:
            streamer, t0 = FirstToken(), time.perf_counter()
            out = model.generate(
                torch.tensor([ids]),
                max_new_tokens=output_len,
                min_new_tokens=output_len,
                do_sample=False,
                streamer=streamer,
            )
            ttfts.append(streamer.first - t0)
            tokens += out.shape[1] - len(ids)
    seconds = _clock() - start
    return Row("HF generate, one at a time", len(prompts), seconds, tokens, sum(ttfts) / len(ttfts))


def run_hf_batched(path: str, prompts: list[list[int]], output_len: int) -> Row:
    """The same requests through one HF `generate` call: a left-padded batch with its attention mask
    (HF's own batching, the fair reference for an engine that batches). TTFT: the batch's first token."""
    import torch
    from transformers import AutoModelForCausalLM, StoppingCriteria

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    width = max(len(ids) for ids in prompts)
    pad = 0  # any id: the mask hides it
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompts])
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
    first: list[float] = []

    class FirstStep(StoppingCriteria):  # called after each generated token; never stops the batch
        def __call__(self, ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
            if not first:
                first.append(time.perf_counter())
            return torch.zeros(ids.shape[0], dtype=torch.bool)

    start, t0 = _clock(), time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            input_ids,
            attention_mask=mask,
            pad_token_id=pad,
            max_new_tokens=output_len,
            min_new_tokens=output_len,
            do_sample=False,
            stopping_criteria=[FirstStep()],
        )
    seconds = _clock() - start
    tokens = (out.shape[1] - width) * len(prompts)
    return Row(f"HF generate, batched ({len(prompts)} padded)", len(prompts), seconds, tokens, first[0] - t0)


def bench_radix_tree(num_requests: int, prefix_len: int, unique_len: int) -> float:
    """match + insert per second over requests sharing a prefix, page_size 1."""
    rng = random.Random(1)
    prefix = [rng.randrange(*_TOKEN_RANGE) for _ in range(prefix_len)]
    keys = [tuple(prefix + [rng.randrange(*_TOKEN_RANGE) for _ in range(unique_len)]) for _ in range(num_requests)]
    cache = RadixCache(page_size=1, free_slots=lambda slots: None)
    next_slot = 0
    start = _clock()
    for key in keys:
        slots, node = cache.match_prefix(key)
        new = range(next_slot, next_slot + len(key) - len(slots))
        next_slot += len(new)
        cache.insert(key, (*slots, *new), start=node)
    return num_requests / (_clock() - start)


def bench_long_prompt_ttft(config: EngineConfig, length: int) -> tuple[float, float]:
    engine = Engine(config)
    prompt = gsp_prompts(1, 1, length, 0, seed=3)[0]
    once = SamplingParams(max_new_tokens=1, temperature=0.0)
    times = []
    for _ in range(2):  # cold, then the same prompt fully cached
        out = engine.generate(input_ids=[prompt], sampling=once)[0]
        times.append(out.times["first_token"] - out.times["arrival"])
    engine.check_idle_invariant()
    engine.shutdown()
    return times[0], times[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="radixgate bench offline", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default="tiny")
    p.add_argument("--num-groups", type=int, default=8)
    p.add_argument("--prompts-per-group", type=int, default=16)
    p.add_argument("--system-prompt-len", type=int, default=1024)
    p.add_argument("--question-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--hf-requests", type=int, default=8, help="requests run through HF generate (0: skip)")
    p.add_argument("--tree-requests", type=int, default=2000)
    p.add_argument("--long-prompt-len", type=int, default=4096)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads for every configuration (default: torch's, one per core); "
        "1 gives steadier figures on a machine shared with other work",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    p.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="throughput in wall time, or this process's CPU time"
    )
    args = p.parse_args(argv)
    import torch

    global _clock
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter

    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()

    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=args.json)

    prompts = gsp_prompts(args.num_groups, args.prompts_per_group, args.system_prompt_len, args.question_len)
    pool = len(prompts) * (args.system_prompt_len + args.question_len + args.output_len) + 4096
    base = dict(model_path=args.model_path, max_total_tokens=pool)
    rows = []
    with console.status("shared-prefix workload: radix cache on"):
        rows.append(run_engine("radixgate, radix cache", EngineConfig(**base), prompts, args.output_len))
    with console.status("shared-prefix workload: radix cache off"):
        rows.append(
            run_engine(
                "radixgate, disable_radix_cache",
                EngineConfig(**base, disable_radix_cache=True),
                prompts,
                args.output_len,
            )
        )
    if args.hf_requests:
        from radixgate.engine.models.tiny import ensure_tiny_checkpoint

        path = ensure_tiny_checkpoint() if args.model_path == "tiny" else args.model_path
        with console.status("shared-prefix workload: HF generate"):
            rows.append(run_hf(path, prompts[: args.hf_requests], args.output_len))
        with console.status("shared-prefix workload: HF generate, batched"):
            rows.append(run_hf_batched(path, prompts[: args.hf_requests], args.output_len))
    with console.status("radix tree alone"):
        tree_ops = bench_radix_tree(args.tree_requests, 1000, 200)
        policy_ops = tree_speed(EVICTION_POLICIES, args.tree_requests)
    with console.status("long-prompt TTFT"):
        cold, warm = bench_long_prompt_ttft(
            EngineConfig(
                model_path=args.model_path, max_total_tokens=args.long_prompt_len + 1024, chunked_prefill_size=8192
            ),
            args.long_prompt_len,
        )

    ref = rows[0]
    result = {
        "workload": {
            "threads": args.threads,
            "groups": args.num_groups,
            "prompts_per_group": args.prompts_per_group,
            "system_prompt_len": args.system_prompt_len,
            "question_len": args.question_len,
            "output_len": args.output_len,
        },
        "rows": [
            {
                "name": r.name,
                "requests": r.requests,
                "seconds": r.seconds,
                "output_tok_per_s": r.output_throughput,
                "req_per_s": r.request_throughput,
                "mean_ttft_s": r.mean_ttft_s,
                "speedup_of_radix_cache": ref.output_throughput / r.output_throughput,
            }
            for r in rows
        ],
        "radix_tree_match_insert_per_s": tree_ops,
        "radix_tree_evicting_cpu_match_insert_per_s": policy_ops,
        "long_prompt": {
            "tokens": args.long_prompt_len,
            "cold_ttft_s": cold,
            "cached_ttft_s": warm,
            "cached_over_cold": warm / cold,
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    w = result["workload"]
    table = Table(
        title=f"shared-prefix workload: {w['groups']} groups x {w['prompts_per_group']} prompts, "
        f"{w['system_prompt_len']}-token system prompt, {w['question_len']}-token question, "
        f"{w['output_len']} output tokens; {w['threads']} torch thread(s)"
    )
    for col in ("configuration", "requests", "output tok/s", "req/s", "mean TTFT (s)*", "radix cache is x faster"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for r in result["rows"]:
        table.add_row(
            r["name"],
            str(r["requests"]),
            f"{r['output_tok_per_s']:.1f}",
            f"{r['req_per_s']:.2f}",
            f"{r['mean_ttft_s']:.3f}",
            f"{r['speedup_of_radix_cache']:.1f}x",
        )
    console.print(table)
    console.print(
        "* radixgate receives all requests at once, so its TTFT includes queueing; HF's one-at-a-time "
        "row runs one request at a time and does not; its batched row is the batch's first token."
    )
    other = Table(title="radix tree and long-prompt TTFT")
    other.add_column("measure")
    other.add_column("value", justify="right")
    other.add_row(
        f"radix tree match+insert/s ({args.tree_requests} requests, 1000 shared + 200 unique tokens)",
        f"{tree_ops:,.0f}",
    )
    for policy, (ops, ratio) in policy_ops.items():
        other.add_row(f"radix tree match+insert/s, {policy}, evicting (CPU time; / lru)", f"{ops:,.0f} ({ratio:.2f})")
    other.add_row(f"TTFT cold, {args.long_prompt_len}-token prompt (s)", f"{cold:.3f}")
    other.add_row("TTFT fully cached, same prompt (s)", f"{warm:.4f}")
    other.add_row("cached / cold", f"{warm / cold:.2%}")
    console.print(other)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
