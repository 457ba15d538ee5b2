"""Kernel benchmarks: `python -m radixgate.bench.kernels` (meant for a CUDA machine).

decode   Triton decode attention over a paged pool (pages scattered at random), at Llama-3.1-8B
         attention shapes by default (32 query heads, 8 KV heads, head_dim 128), batch 64 x 4096
         tokens. Reports the bytes of K/V read per second against a measured device copy
         (read + write bytes per second of a same-size `Tensor.copy_`), for a sweep of split
         counts and block sizes, in 16-bit and FP8 KV.
extend   Triton extend attention (cached prefix read through the pool + causal new tokens),
         in TFLOP/s, next to torch's scaled_dot_product_attention on the dense causal problem
         of the same new-token length as a yardstick.
On CPU (`--device cpu`, tiny sizes) the same code runs under Triton's interpreter as a smoke test.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

import torch

from radixgate.engine.kernels.decode_attention import (
    decode_attention_torch,
    decode_attention_triton,
    default_num_kv_splits,
)
from radixgate.engine.kernels.extend_attention import extend_attention_torch, extend_attention_triton
from radixgate.engine.kernels.fp8 import FP8_DTYPES


def timed(fn: Callable[[], object], device: torch.device, iters: int, warmup: int = 2) -> float:
    """Mean seconds per call."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def copy_bandwidth(nbytes: int, device: torch.device, iters: int) -> float:
    """Bytes moved (read + written) per second by a device-to-device copy of `nbytes`."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / timed(lambda: dst.copy_(src), device, iters)


def paged_pool(
    kv_lens: list[int],
    num_kv_heads: int,
    head_dim: int,
    page_size: int,
    kv_dtype: torch.dtype,
    device: torch.device,
    gen: torch.Generator,
):
    """K/V caches holding every request's tokens on pages scattered at random, and their slot layout."""
    pages = [-(-n // page_size) for n in kv_lens]
    order = torch.randperm(sum(pages), generator=gen)
    indices, first = [], 0
    for n, p in zip(kv_lens, pages, strict=False):
        table = order[first : first + p]
        first += p
        pos = torch.arange(n)
        indices.append(table[pos // page_size] * page_size + pos % page_size)
    num_slots = sum(pages) * page_size
    caches = [torch.randn((num_slots, num_kv_heads, head_dim), generator=gen).to(device).to(kv_dtype) for _ in range(2)]
    indptr = torch.tensor([0] + torch.tensor(kv_lens).cumsum(0).tolist(), dtype=torch.int64, device=device)
    return caches[0], caches[1], indptr, torch.cat(indices).to(device)


def bench_decode(args, device: torch.device, dtype: torch.dtype, kv_name: str, copy_bw: float) -> dict:
    gen = torch.Generator().manual_seed(0)
    kv_dtype = FP8_DTYPES.get(kv_name, dtype)
    lens = [args.context] * args.batch
    k_cache, v_cache, indptr, indices = paged_pool(
        lens, args.kv_heads, args.head_dim, args.page_size, kv_dtype, device, gen
    )
    q = torch.randn((args.batch, args.heads, args.head_dim), generator=gen).to(dtype).to(device)
    scales = (0.05, 0.05) if kv_dtype.itemsize == 1 else (1.0, 1.0)
    sm_scale = 1 / math.sqrt(args.head_dim)
    kv_bytes = 2 * sum(lens) * args.kv_heads * args.head_dim * kv_dtype.itemsize
    # Correctness at this shape, on the first two requests (the torch reference gathers densely).
    sub = slice(0, min(2, args.batch))
    sub_indptr = indptr[:3] if args.batch >= 2 else indptr
    ref = decode_attention_torch(q[sub], k_cache, v_cache, sub_indptr, indices, sm_scale, *scales)
    got = decode_attention_triton(q[sub], k_cache, v_cache, sub_indptr, indices, sm_scale, *scales)
    err = float((got.float() - ref.float()).abs().max() / ref.float().abs().max())
    # The engine's defaults first, then the sweep.
    configs = [(default_num_kv_splits(args.batch, args.kv_heads, device), 64, 4, 2, True)]
    configs += [
        (s, b, w, st, False) for s in args.splits for b in args.block_n for w in args.warps for st in args.stages
    ]
    rows = []
    for splits, block_n, warps, stages, is_default in configs:

        def run(splits: int = splits, block_n: int = block_n, warps: int = warps, stages: int = stages) -> None:
            decode_attention_triton(
                q,
                k_cache,
                v_cache,
                indptr,
                indices,
                sm_scale,
                *scales,
                num_kv_splits=splits,
                block_n=block_n,
                num_warps=warps,
                num_stages=stages,
            )

        try:
            seconds = timed(run, device, args.iters)
        except Exception as e:  # a config that does not compile on this GPU is reported, not fatal
            print(f"  decode splits={splits} block_n={block_n} warps={warps} stages={stages}: {type(e).__name__}: {e}")
            continue
        bw = kv_bytes / seconds
        rows.append(
            dict(
                splits=splits,
                block_n=block_n,
                warps=warps,
                stages=stages,
                default=is_default,
                us=seconds * 1e6,
                gbps=bw / 1e9,
                of_copy=bw / copy_bw,
            )
        )
        print(
            f"  decode {kv_name:<8} splits={splits:<3} block_n={block_n:<4} warps={warps} stages={stages}"
            f"{' (default)' if is_default else '          '}: {seconds * 1e6:9.1f} us  {bw / 1e9:8.1f} GB/s  "
            f"{bw / copy_bw:6.1%} of copy"
        )
    best = max(rows, key=lambda r: r["gbps"]) if rows else None
    default = rows[0] if rows and rows[0]["default"] else None
    return dict(
        kernel="decode",
        kv_dtype=kv_name,
        batch=args.batch,
        context=args.context,
        kv_bytes=kv_bytes,
        rel_err=err,
        best=best,
        default=default,
    )


def bench_extend(args, device: torch.device, dtype: torch.dtype) -> dict:
    gen = torch.Generator().manual_seed(1)
    q_len, prefix = args.extend_new, args.extend_prefix
    lens = [prefix + q_len] * args.extend_batch
    k_cache, v_cache, kv_indptr, kv_indices = paged_pool(
        lens, args.kv_heads, args.head_dim, args.page_size, dtype, device, gen
    )
    q = torch.randn((q_len * args.extend_batch, args.heads, args.head_dim), generator=gen).to(dtype).to(device)
    qo_indptr = torch.arange(args.extend_batch + 1, dtype=torch.int64, device=device) * q_len
    sm_scale = 1 / math.sqrt(args.head_dim)
    call = (q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale)
    ref = extend_attention_torch(*call)
    err = float((extend_attention_triton(*call).float() - ref.float()).abs().max() / ref.float().abs().max())
    visible = args.extend_batch * (q_len * prefix + q_len * (q_len + 1) / 2)
    flops = 4 * args.heads * args.head_dim * visible
    seconds = timed(lambda: extend_attention_triton(*call), device, args.iters)
    # Yardstick: dense causal attention over the new tokens only (no prefix), same FLOP formula.
    qd = torch.randn((args.extend_batch, args.heads, q_len, args.head_dim), generator=gen).to(dtype).to(device)
    kd = torch.randn((args.extend_batch, args.kv_heads, q_len, args.head_dim), generator=gen).to(dtype).to(device)
    sdpa = timed(
        lambda: torch.nn.functional.scaled_dot_product_attention(qd, kd, kd, is_causal=True, enable_gqa=True),
        device,
        args.iters,
    )
    sdpa_flops = 4 * args.heads * args.head_dim * args.extend_batch * q_len * (q_len + 1) / 2
    print(
        f"  extend batch={args.extend_batch} prefix={prefix} new={q_len}: {seconds * 1e3:8.2f} ms "
        f"{flops / seconds / 1e12:7.1f} TFLOP/s (rel err {err:.1e}); SDPA dense causal new-only: "
        f"{sdpa_flops / sdpa / 1e12:7.1f} TFLOP/s"
    )
    return dict(
        kernel="extend",
        tflops=flops / seconds / 1e12,
        ms=seconds * 1e3,
        rel_err=err,
        sdpa_dense_causal_tflops=sdpa_flops / sdpa / 1e12,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--kv-cache-dtypes", nargs="+", default=["auto", "fp8_e4m3"])
    p.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--block-n", type=int, nargs="+", default=[64, 128])
    p.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    p.add_argument("--stages", type=int, nargs="+", default=[2, 3])
    p.add_argument("--extend-batch", type=int, default=4)
    p.add_argument("--extend-prefix", type=int, default=4096)
    p.add_argument("--extend-new", type=int, default=2048)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--target", type=float, default=0.6, help="decode bandwidth target as a fraction of copy")
    args = p.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter)"
    kv_bytes_16 = 2 * args.batch * args.context * args.kv_heads * args.head_dim * dtype.itemsize
    copy_bw = copy_bandwidth(kv_bytes_16, device, args.iters)
    print(f"device: {name}; device copy of {kv_bytes_16 / 2**30:.2f} GiB: {copy_bw / 1e9:.1f} GB/s (read + write)")
    results = [bench_decode(args, device, dtype, kv, copy_bw) for kv in args.kv_cache_dtypes]
    results.append(bench_extend(args, device, dtype))
    ok = True
    for r in results[:-1]:
        best = r["best"]
        if best is None:
            ok = False
            continue
        passed = best["of_copy"] >= args.target
        ok &= passed and r["rel_err"] < 2e-2
        if r["default"] is not None:
            print(
                f"decode {r['kv_dtype']}: engine defaults {r['default']['gbps']:.1f} GB/s = "
                f"{r['default']['of_copy']:.1%} of copy"
            )
        print(
            f"decode {r['kv_dtype']}: best {best['gbps']:.1f} GB/s = {best['of_copy']:.1%} of copy "
            f"(splits={best['splits']}, block_n={best['block_n']}, warps={best['warps']}, stages={best['stages']}), "
            f"rel err {r['rel_err']:.1e}: {'PASS' if passed else 'BELOW'} the {args.target:.0%} target"
        )
    print("RESULT " + json.dumps(dict(device=name, copy_gbps=copy_bw / 1e9, results=results)))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
