"""Compile the Triton kernels for a GPU without one: `python -m radixgate.bench.compile_check`.

Triton lowers a kernel to PTX and assembles it with the `ptxas` bundled in its wheel, all on the
host, so a CPU-only machine can check that every kernel compiles for a given architecture at
the configurations the engine launches (the interpreter accepts some programs the compiler
rejects) and see each one's shared memory. It needs compiled, not interpreted, kernels, so it
re-runs itself with TRITON_INTERPRET=0 when started otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any


def _configs(quick: bool) -> list[tuple[str, Any, dict[str, str], dict[str, Any]]]:
    """(label, kernel, argument types, constexprs) for the engine's launch configurations."""
    import triton.language as tl

    from radixgate.engine.kernels.decode_attention import _decode_merge_kernel, _decode_split_kernel
    from radixgate.engine.kernels.extend_attention import _extend_kernel
    from radixgate.engine.kernels.store_kv import _store_kv_kernel

    fp8 = {"fp8e4nv": (3, -6, 448.0), "fp8e5": (2, -14, 57344.0)}
    dot = {"bf16": (tl.bfloat16, "tf32"), "fp16": (tl.float16, "tf32"), "fp32": (tl.float32, "ieee")}
    acts = ["bf16"] if quick else ["bf16", "fp16", "fp32"]
    caches = ["same", "fp8e4nv"] if quick else ["same", "fp8e4nv", "fp8e5"]
    head_dims = [128] if quick else [64, 128, 96]
    groups = [4] if quick else [1, 4, 8]
    out = []
    for act in acts:
        for cache in caches:
            cache_ty = act if cache == "same" else cache
            mant, min_exp, top = fp8.get(cache_ty, (0, 0, 0.0))
            for head_dim in head_dims:
                block_d = 1 << (head_dim - 1).bit_length()
                io = {
                    "k_ptr": f"*{act}",
                    "v_ptr": f"*{act}",
                    "k_cache_ptr": f"*{cache_ty}",
                    "v_cache_ptr": f"*{cache_ty}",
                    "slots_ptr": "*i64",
                    "k_inv_scale": "fp32",
                    "v_inv_scale": "fp32",
                }
                out.append(
                    (
                        f"store {act}->{cache_ty} d={head_dim}",
                        _store_kv_kernel,
                        io,
                        dict(
                            NUM_KV_HEADS=8,
                            HEAD_DIM=head_dim,
                            BLOCK_H=8,
                            BLOCK_D=block_d,
                            IS_FP8=cache_ty in fp8,
                            MANTISSA_BITS=mant,
                            MIN_NORMAL_EXP=min_exp,
                            FP8_MAX=top,
                        ),
                    )
                )
                attn = {
                    "q_ptr": f"*{act}",
                    "k_cache_ptr": f"*{cache_ty}",
                    "v_cache_ptr": f"*{cache_ty}",
                    "o_ptr": f"*{act}",
                    "kv_indptr_ptr": "*i64",
                    "kv_indices_ptr": "*i64",
                    "qo_indptr_ptr": "*i64",
                    "qk_scale": "fp32",
                    "v_scale": "fp32",
                }
                dot_dtype, precision = dot[act]
                for group in groups:
                    out.append(
                        (
                            f"decode {act} kv={cache_ty} d={head_dim} gqa={group}",
                            _decode_split_kernel,
                            attn,
                            dict(
                                GROUP_SIZE=group,
                                HEAD_DIM=head_dim,
                                NUM_SPLITS=4,
                                BLOCK_H=max(16, 1 << (group - 1).bit_length()),
                                BLOCK_N=64,
                                BLOCK_D=block_d,
                                DOT_DTYPE=dot_dtype,
                                DOT_PRECISION=precision,
                            ),
                        )
                    )
                out.append(
                    (
                        f"extend {act} kv={cache_ty} d={head_dim}",
                        _extend_kernel,
                        attn,
                        dict(
                            GROUP_SIZE=4,
                            HEAD_DIM=head_dim,
                            BLOCK_M=64,
                            BLOCK_N=64,
                            BLOCK_D=block_d,
                            DOT_DTYPE=dot_dtype,
                            DOT_PRECISION=precision,
                        ),
                    )
                )
        out.append(
            (
                f"decode merge -> {act}",
                _decode_merge_kernel,
                {"o_ptr": f"*{act}", "v_scale": "fp32"},
                dict(HEAD_DIM=128, NUM_SPLITS=4, BLOCK_S=4, BLOCK_D=128),
            )
        )
    return out


def _resource_usage(cubin: bytes) -> str:
    """Registers per thread and local (spill) bytes, read by the cuobjdump bundled with Triton."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            usage = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, timeout=60).stdout
        except OSError:
            return ""
    found = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", usage))
    return f"regs {found.get('REG', '?'):>3}  stack {found.get('STACK', '?'):>3} B" if found else ""


def compile_all(arch: int, quick: bool, num_warps: int = 4, num_stages: int = 2) -> int:
    """Compiles every configuration for sm_`arch`; prints one line each, returns the failures."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", arch, 32)
    failures = 0
    for label, kernel, types, constexprs in _configs(quick):
        signature = {
            name: "constexpr"
            if name in constexprs
            else types.get(name, "*fp32" if name.endswith("_ptr") else "fp32" if "scale" in name else "i32")
            for name in kernel.arg_names
        }
        # As Triton's launcher specializes them at run time: 16-byte aligned tensors and strides
        # divisible by 16 (true of the engine's buffers for head_dim 64, 96, 128).
        attrs = {
            (i,): [["tt.divisibility", 16]]
            for i, name in enumerate(kernel.arg_names)
            if signature[name].startswith("*") or signature[name] == "i32"
        }
        start = time.perf_counter()
        try:
            compiled = triton.compile(
                ASTSource(kernel, signature, constexprs, attrs),
                target=target,
                options=dict(num_warps=num_warps, num_stages=num_stages),
            )
            status = f"ok  shared {compiled.metadata.shared:>6} B  {_resource_usage(compiled.asm['cubin'])}"
        except Exception as e:  # report every configuration, then fail once at the end
            failures += 1
            status = f"FAILED {type(e).__name__}: {str(e).strip().splitlines()[-1][:160]}"
        print(f"sm_{arch} {label:<40} {time.perf_counter() - start:5.1f} s  {status}", flush=True)
    return failures


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", type=int, nargs="+", default=[90], help="compute capabilities, e.g. 80 89 90")
    p.add_argument("--quick", action="store_true", help="bf16 activations, head_dim 128, GQA 4 only")
    args = p.parse_args(argv)
    from radixgate.engine.kernels.decode_attention import _decode_split_kernel
    from radixgate.engine.kernels.triton_runtime import HAS_TRITON, is_interpreted

    if not HAS_TRITON:
        print("triton is not installed")
        return 2
    if is_interpreted(_decode_split_kernel):
        if os.environ.get("TRITON_INTERPRET") == "0":
            print("kernels are still interpreted with TRITON_INTERPRET=0")
            return 2
        env = dict(os.environ, TRITON_INTERPRET="0")
        os.execve(sys.executable, [sys.executable, "-m", "radixgate.bench.compile_check", *argv], env)
    return 1 if sum(compile_all(arch, args.quick) for arch in args.arch) else 0


if __name__ == "__main__":
    raise SystemExit(main())
