"""Decode steps as CUDA graphs against eager decode, on a CUDA machine (scripts/gpu_check.sh).

    radixgate bench cuda-graph                  # equality on the tiny model, then tokens/s on the 8B shape
    radixgate bench cuda-graph --shape small    # quicker speed part

1. Equality: the tiny model in float32 with the Triton backend, greedy, the same prompts with
   graphs on and off (`disable_cuda_graph`); batch sizes that are and are not captured sizes, so
   padding is exercised. Prints the requests whose tokens match and, for the others, where they
   first diverge. A padded batch may pick different GEMM tiles than the eager one, so a near-tie
   can flip; more than 10% of requests differing fails.
2. Speed: the random-weight checkpoint of `radixgate bench gpu-engine` (bf16), decode-heavy
   batches (short prompts, long outputs) at several batch sizes, graphs on and off side by side
   in one run; prints output tokens/s and the ratio.
On a machine without CUDA it says so and exits 0 (nothing to capture)."""

from __future__ import annotations

import argparse
import json
import os
import time

import torch


def _engine(model_path: str, dtype: str, graphs: bool, max_bs: int):
    from radixgate.engine import Engine, EngineConfig

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
            mem_fraction_static=0.3,
        )
    )


def equality(num_prompts: int, output_len: int) -> dict:
    from radixgate.engine import SamplingParams

    sampling = SamplingParams(temperature=0.0, max_new_tokens=output_len, ignore_eos=True)
    prompts = [f"Prompt {i}: write about the number {i * 13} and its neighbours." for i in range(num_prompts)]
    outputs = {}
    for graphs in (False, True):
        engine = _engine("tiny", "float32", graphs, max_bs=32)
        got: list[list[int]] = []
        for size in (1, 3, 8, 13, 32):  # captured sizes and sizes padded up
            for start in range(0, num_prompts, size):
                got += [o.token_ids for o in engine.generate(prompts[start : start + size], sampling=sampling)]
                engine.flush_cache()
        stats = engine.stats()
        engine.shutdown()
        outputs[graphs] = (got, stats)
    eager, (graphed, stats) = outputs[False][0], outputs[True]
    diverge = [
        (i, next(j for j, (a, b) in enumerate(zip(x, y, strict=True)) if a != b))
        for i, (x, y) in enumerate(zip(eager, graphed, strict=True))
        if x != y
    ]
    return dict(
        requests=len(eager),
        equal=len(eager) - len(diverge),
        first_divergences=diverge[:10],
        graph_state=stats["cuda_graph"],
        graph_steps=stats["cuda_graph_steps"],
    )


def speed(shape: str, batch_sizes: list[int], output_len: int) -> list[dict]:
    from radixgate.bench.gpu_engine import SHAPES, write_checkpoint
    from radixgate.engine import SamplingParams

    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"radixgate-llama-{shape}-random")
    write_checkpoint(path, SHAPES[shape], "cuda")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=output_len, ignore_eos=True)
    gen = torch.Generator().manual_seed(0)
    rows = {bs: {} for bs in batch_sizes}
    for graphs in (False, True):
        engine = _engine(path, "bfloat16", graphs, max_bs=max(batch_sizes))
        engine.generate(input_ids=[[1, 2, 3]], sampling=SamplingParams(max_new_tokens=4))  # compile
        for bs in batch_sizes:
            prompts = [torch.randint(0, 100000, (32,), generator=gen).tolist() for _ in range(bs)]
            engine.generate(input_ids=prompts, sampling=SamplingParams(max_new_tokens=2))  # capture this size
            engine.flush_cache()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            outs = engine.generate(input_ids=prompts, sampling=sampling)
            torch.cuda.synchronize()
            rows[bs]["graph" if graphs else "eager"] = sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t0)
            engine.flush_cache()
        engine.shutdown()
        torch.cuda.empty_cache()
    return [
        dict(batch=bs, eager_tok_s=round(r["eager"], 1), graph_tok_s=round(r["graph"], 1)) for bs, r in rows.items()
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=["8b", "small"], default="8b")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--num-prompts", type=int, default=64)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("cuda-graph: skipped, no CUDA device here (CUDA graphs only run on a GPU)")
        return 0
    eq = equality(args.num_prompts, 32)
    print(
        f"cuda-graph equality (tiny, float32, triton): {eq['equal']}/{eq['requests']} requests token-equal, "
        f"{eq['graph_steps']} graphed decode steps ({eq['graph_state']}); first divergences {eq['first_divergences']}"
    )
    rows = speed(args.shape, args.batch_sizes, args.output_len)
    for r in rows:
        print(
            f"cuda-graph speed ({args.shape}, bf16) batch {r['batch']:>3}: eager {r['eager_tok_s']:>9.1f} tok/s, "
            f"graph {r['graph_tok_s']:>9.1f} tok/s, x{r['graph_tok_s'] / r['eager_tok_s']:.2f}"
        )
    print("RESULT " + json.dumps(dict(equality=eq, speed=rows)))
    ok = eq["graph_steps"] > 0 and eq["equal"] >= 0.9 * eq["requests"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
