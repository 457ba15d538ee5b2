"""Decode as CUDA graphs and with overlap scheduling against plain eager decode, on a CUDA machine
(two steps of scripts/gpu_check.sh).

    radixgate bench cuda-graph                                   # eager vs graph
    radixgate bench cuda-graph --modes graph graph+overlap       # overlap scheduling on top of graphs
    radixgate bench cuda-graph --shape small                     # quicker speed part

Modes: `eager` (`disable_cuda_graph`), `graph` (decode steps replayed as CUDA graphs),
`overlap` (eager with `enable_overlap_schedule`), `graph+overlap`. The first mode is the baseline.
1. Equality: the tiny model in float32 with the Triton backend, greedy, the same prompts in every
   mode; batch sizes that are and are not captured sizes, so padding is exercised. Prints the
   requests whose tokens match the baseline and, for the others, where they first diverge. A
   padded batch may pick different GEMM tiles than the eager one, so a near-tie can flip; more
   than 10% of requests differing fails.
2. Speed: the random-weight checkpoint of `radixgate bench gpu-engine` (bf16), decode-heavy
   batches (short prompts, long outputs) at several batch sizes, every mode side by side in one
   run; prints output tokens/s and the ratio to the baseline.
On a machine without CUDA it says so and exits 0 (nothing to capture)."""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

MODES = {"eager": (False, False), "graph": (True, False), "overlap": (False, True), "graph+overlap": (True, True)}


def _engine(model_path: str, dtype: str, mode: str, max_bs: int):
    from radixgate.engine import Engine, EngineConfig

    graphs, overlap = MODES[mode]
    return Engine(
        EngineConfig(
            model_path=model_path,
            device="cuda",
            dtype=dtype,
            page_size=16,
            attention_backend="triton",
            max_running_requests=max_bs,
            cuda_graph_max_bs=max_bs if graphs else None,
            disable_cuda_graph=not graphs,
            enable_overlap_schedule=overlap,
            mem_fraction_static=0.3,
        )
    )


def equality(modes: list[str], num_prompts: int, output_len: int) -> dict:
    from radixgate.engine import SamplingParams

    sampling = SamplingParams(temperature=0.0, max_new_tokens=output_len, ignore_eos=True)
    prompts = [f"Prompt {i}: write about the number {i * 13} and its neighbours." for i in range(num_prompts)]
    outputs = {}
    for mode in modes:
        engine = _engine("tiny", "float32", mode, max_bs=32)
        got: list[list[int]] = []
        for size in (1, 3, 8, 13, 32):  # captured sizes and sizes padded up
            for start in range(0, num_prompts, size):
                got += [o.token_ids for o in engine.generate(prompts[start : start + size], sampling=sampling)]
                engine.flush_cache()
        stats = engine.stats()
        engine.shutdown()
        outputs[mode] = (got, stats)
    base = outputs[modes[0]][0]
    report = {}
    for mode in modes[1:]:
        got, stats = outputs[mode]
        diverge = [
            (i, next(j for j, (a, b) in enumerate(zip(x, y, strict=True)) if a != b))
            for i, (x, y) in enumerate(zip(base, got, strict=True))
            if x != y
        ]
        report[mode] = dict(
            requests=len(base),
            equal=len(base) - len(diverge),
            first_divergences=diverge[:10],
            graph_state=stats["cuda_graph"],
            graph_steps=stats["cuda_graph_steps"],
            overlap_steps=stats["overlap_steps"],
        )
    return report


def speed(modes: list[str], shape: str, batch_sizes: list[int], output_len: int) -> list[dict]:
    from radixgate.bench.gpu_engine import SHAPES, write_checkpoint
    from radixgate.engine import SamplingParams

    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"radixgate-llama-{shape}-random")
    write_checkpoint(path, SHAPES[shape], "cuda")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=output_len, ignore_eos=True)
    gen = torch.Generator().manual_seed(0)
    rows: dict[int, dict[str, float]] = {bs: {} for bs in batch_sizes}
    for mode in modes:
        engine = _engine(path, "bfloat16", mode, max_bs=max(batch_sizes))
        engine.generate(input_ids=[[1, 2, 3]], sampling=SamplingParams(max_new_tokens=4))  # compile
        for bs in batch_sizes:
            prompts = [torch.randint(0, 100000, (32,), generator=gen).tolist() for _ in range(bs)]
            engine.generate(input_ids=prompts, sampling=SamplingParams(max_new_tokens=2))  # capture this size
            engine.flush_cache()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            outs = engine.generate(input_ids=prompts, sampling=sampling)
            torch.cuda.synchronize()
            rows[bs][mode] = sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t0)
            engine.flush_cache()
        engine.shutdown()
        torch.cuda.empty_cache()
    return [dict(batch=bs, **{m: round(t, 1) for m, t in r.items()}) for bs, r in rows.items()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=["8b", "small"], default="8b")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument(
        "--modes", nargs="+", choices=sorted(MODES), default=["eager", "graph"], help="the first is the baseline"
    )
    args = p.parse_args(argv)
    if len(args.modes) < 2:
        p.error("--modes needs a baseline and at least one mode to compare with it")
    if not torch.cuda.is_available():
        print("cuda-graph: skipped, no CUDA device here (CUDA graphs only run on a GPU)")
        return 0
    base = args.modes[0]
    eq = equality(args.modes, args.num_prompts, 32)
    ok = True
    for mode, r in eq.items():
        print(
            f"cuda-graph equality (tiny, float32, triton) {mode} vs {base}: {r['equal']}/{r['requests']} requests "
            f"token-equal; {r['graph_steps']} graphed steps ({r['graph_state']}), {r['overlap_steps']} overlapped "
            f"steps; first divergences {r['first_divergences']}"
        )
        used = (r["graph_steps"] > 0 or not MODES[mode][0]) and (r["overlap_steps"] > 0 or not MODES[mode][1])
        ok = ok and used and r["equal"] >= 0.9 * r["requests"]
    rows = speed(args.modes, args.shape, args.batch_sizes, args.output_len)
    for r in rows:
        cells = ", ".join(f"{m} {r[m]:.1f} tok/s (x{r[m] / r[base]:.2f})" for m in args.modes)
        print(f"cuda-graph speed ({args.shape}, bf16) batch {r['batch']:>3}: {cells}")
    print("RESULT " + json.dumps(dict(modes=args.modes, equality=eq, speed=rows)))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
