"""`radixgate bench roofline`: the engine's prefill and decode as a fraction of this machine's measured
matmul and copy speed (a measured roofline, not the hardware's), and prefill against the CPU's nominal
peak estimated from `lscpu`.

Definitions, fixed so that a figure means the same every time:

- peak: best of 5 `torch.mm` of 2048x2048 float32 matrices, with the engine's thread count;
- bandwidth: a 64 MiB `copy_` (best of 5), counting bytes read plus bytes written;
- prefill: one cold 4,096-token prompt on the tiny model with default settings (one output token);
  FLOPs = 2 x linear parameters x tokens + 2 x 2 x layers x heads x head_dim x tokens^2 / 2 + one
  LM-head row; fraction = (FLOPs / peak) / measured time;
- decode: 32 requests of 128 cached prompt tokens generating 64 tokens each; per decode step,
  ideal = max(step FLOPs / peak, step bytes / bandwidth) with step FLOPs = 2 x (linear + LM-head
  parameters) x 32 + attention over each request's KV, step bytes = every weight read once plus the
  KV each request reads; fraction = ideal / measured mean step time. The time of a decode step spent
  outside the model's forward is split into scheduling, batch building and the rest (sampling,
  bookkeeping, detokenization).

"Before" runs the same measurement on the engine of an older commit (default 553fdab, the engine
before this work), extracted with `git archive` and run in a subprocess, in the same run. Peak and
bandwidth are measured before and after the engines; the higher of each is used (the conservative
choice on a shared machine).

- nominal peak (estimated): clock (`lscpu`'s CPU max MHz, else its CPU MHz, else /proc/cpuinfo's)
  x physical cores x float32 FLOPs per FMA instruction (2 x 16 lanes with AVX-512, 2 x 8 with
  AVX2+FMA), one FMA unit per core assumed; omitted when any of these cannot be read."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

MIB = 1 << 20
# Wall time by default; `--clock cpu` reads this process's CPU time instead, which a machine shared
# with other work disturbs far less (meaningful with one thread: RADIXGATE_NUM_THREADS=1).
_clock: Callable[[], float] = time.perf_counter


def measure_peak_flops(repeats: int = 5) -> float:
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * 2048**3 / best


def measure_bandwidth(repeats: int = 5) -> float:
    src, dst = torch.randn(64 * MIB // 4), torch.empty(64 * MIB // 4)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(repeats))
    return 2 * 64 * MIB / best


def nominal_peak_flops(lscpu: str | None = None, cpuinfo: str | None = None) -> float | None:
    """The estimated float32 peak from `lscpu` (see the module's definitions), or None if unreadable."""
    try:
        lscpu = lscpu if lscpu is not None else subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        if cpuinfo is None:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
    except OSError:
        return None
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lscpu.splitlines())}
    mhz = fields.get("CPU max MHz") or fields.get("CPU MHz")
    if not mhz:
        mhz = next(
            (v.strip() for k, _, v in (x.partition(":") for x in cpuinfo.splitlines()) if k.strip() == "cpu MHz"), ""
        )
    flags = set(fields.get("Flags", "").split())
    lanes = 16 if "avx512f" in flags else 8 if {"avx2", "fma"} <= flags else 0
    try:
        cores = int(fields["Core(s) per socket"]) * int(fields["Socket(s)"])
        clock_hz = float(mhz) * 1e6
    except (KeyError, ValueError):
        return None
    return clock_hz * cores * 2 * lanes if lanes else None


def _timed(fn: Callable[[], Any]) -> float:
    start = _clock()
    fn()
    return _clock() - start


# ---- the engine measurement (runs in this process, or in a subprocess on an older engine) --------
def measure_engine(prompt_len: int, batch: int, decode_prompt: int, decode_tokens: int) -> dict[str, Any]:
    """Times the prefill and decode workloads on the engine importable as `radixgate.engine`."""
    from radixgate.engine.config import EngineConfig, SamplingParams
    from radixgate.engine.engine import Engine

    engine = Engine(EngineConfig())
    rng = random.Random(0)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(1000, 50000) for _ in range(n)]

    one = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
    engine.generate(input_ids=[prompt(64)], sampling=one)  # warm-up
    start = _clock()
    engine.generate(input_ids=[prompt(prompt_len)], sampling=one)
    prefill_s = _clock() - start

    prompts = [prompt(decode_prompt) for _ in range(batch)]
    engine.generate(input_ids=prompts, sampling=one)  # the prompts are now cached
    timings = _StepTimer(engine)
    many = SamplingParams(max_new_tokens=decode_tokens, temperature=0.0, ignore_eos=True)
    start = _clock()
    engine.generate(input_ids=prompts, sampling=many)
    total_s = _clock() - start
    timings.remove()
    engine.shutdown()
    steps = timings.decode_steps
    assert steps, "no decode step was timed"
    mean = {key: sum(s[key] for s in steps) / len(steps) for key in steps[0]}
    return {
        "prefill_s": prefill_s,
        "decode_total_s": total_s,
        "decode_steps": len(steps),
        "decode_step_s": mean["step"],
        "decode_model_s": mean["model"],
        "decode_schedule_s": mean["schedule"],
        "decode_batch_build_s": mean["runner"] - mean["model"],
        "decode_rest_s": mean["step"] - mean["runner"] - mean["schedule"],
        "decode_kv_lens": timings.kv_lens,
    }


class _StepTimer:
    """Wraps the engine's step, scheduler, runner and model to time each decode step's parts."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.decode_steps: list[dict[str, float]] = []
        self.kv_lens: list[int] = []  # sum over the batch of each request's KV length, per step
        self._current: dict[str, float] = {}
        self._batch: Any = None
        self._patched: list[tuple[Any, str]] = []
        self._wrap(engine.scheduler, "schedule", "schedule", keep_result=True)
        self._wrap(engine.runner, "forward", "runner")
        self._wrap(engine.runner.model, "forward", "model")
        self._wrap(engine, "step", "step", on_done=self._step_done)

    def _wrap(self, obj: Any, attr: str, key: str, keep_result: bool = False, on_done: Callable | None = None) -> None:
        inner = getattr(obj, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = _clock()
            result = inner(*args, **kwargs)
            self._current[key] = self._current.get(key, 0.0) + _clock() - start
            if keep_result:
                self._batch = result
                if result is not None and result.is_decode:
                    self.kv_lens.append(sum(r.num_computed + 1 for r in result.reqs))
            if on_done is not None:
                on_done()
            return result

        setattr(obj, attr, timed)
        self._patched.append((obj, attr))

    def _step_done(self) -> None:
        if self._batch is not None and self._batch.is_decode:
            self.decode_steps.append({k: self._current.get(k, 0.0) for k in ("step", "schedule", "runner", "model")})
        self._current, self._batch = {}, None

    def remove(self) -> None:
        for obj, attr in self._patched:
            delattr(obj, attr)


# ---- the roofline ---------------------------------------------------------------------------------
def model_shape() -> dict[str, int]:
    from radixgate.engine.models.loader import read_config
    from radixgate.engine.models.tiny import ensure_tiny_checkpoint

    mc = read_config(ensure_tiny_checkpoint())
    h, d = mc.hidden_size, mc.head_dim
    linear = mc.num_layers * (h * mc.num_heads * d * 2 + h * mc.num_kv_heads * d * 2 + 3 * h * mc.intermediate_size)
    embeddings = mc.vocab_size * h * (1 if mc.tie_word_embeddings else 2)
    return {
        "layers": mc.num_layers,
        "heads": mc.num_heads,
        "kv_heads": mc.num_kv_heads,
        "head_dim": d,
        "hidden": h,
        "vocab": mc.vocab_size,
        "linear_params": linear,
        # norms are a rounding error; counted for the bytes all the same
        "weight_bytes": 4 * (linear + embeddings + (2 * mc.num_layers + 1) * h),
    }


def prefill_flops(shape: dict[str, int], tokens: int) -> float:
    attention = 2 * 2 * shape["layers"] * shape["heads"] * shape["head_dim"] * tokens**2 / 2
    return 2 * shape["linear_params"] * tokens + attention + 2 * shape["vocab"] * shape["hidden"]


def decode_step_ideal_s(shape: dict[str, int], batch: int, kv_tokens: float, peak: float, bandwidth: float) -> float:
    """kv_tokens: the KV length summed over the batch's requests (new token included)."""
    per_token_kv = shape["layers"] * shape["kv_heads"] * shape["head_dim"]
    flops = (
        2 * (shape["linear_params"] + shape["vocab"] * shape["hidden"]) * batch
        + 2 * 2 * shape["heads"] * shape["head_dim"] * shape["layers"] * kv_tokens
    )
    bytes_ = shape["weight_bytes"] + 2 * 4 * per_token_kv * kv_tokens
    return max(flops / peak, bytes_ / bandwidth)


def figures(result: dict[str, Any], shape: dict[str, int], args: argparse.Namespace, peak: float, bw: float) -> dict:
    ideal_prefill = prefill_flops(shape, args.prompt_len) / peak
    kv = result["decode_kv_lens"]
    ideal_steps = [decode_step_ideal_s(shape, args.batch, k, peak, bw) for k in kv]
    ideal_step = sum(ideal_steps) / len(ideal_steps)
    return {
        "prefill_tokens_per_s": args.prompt_len / result["prefill_s"],
        "prefill_gflops": prefill_flops(shape, args.prompt_len) / result["prefill_s"] / 1e9,
        "prefill_fraction": ideal_prefill / result["prefill_s"],
        "decode_tokens_per_s": args.batch / result["decode_step_s"],
        "decode_fraction": ideal_step / result["decode_step_s"],
        "decode_step_ms": 1e3 * result["decode_step_s"],
        "decode_ideal_step_ms": 1e3 * ideal_step,
        "outside_model_ms": 1e3 * (result["decode_step_s"] - result["decode_model_s"]),
        "schedule_ms": 1e3 * result["decode_schedule_s"],
        "batch_build_ms": 1e3 * result["decode_batch_build_s"],
        "sampling_and_rest_ms": 1e3 * result["decode_rest_s"],
    }


def run_before(ref: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """The same measurement on the engine of commit `ref`, in a subprocess; None if git cannot give it."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory(prefix="radixgate-before-") as tmp:
        package = os.path.join(tmp, "radixgate")
        for folder, dest in (("sdk", package), ("engine", os.path.join(package, "engine"))):
            os.makedirs(dest, exist_ok=True)
            archive = subprocess.run(
                ["git", "-C", repo, "archive", ref, folder], capture_output=True, check=False, timeout=60
            )
            if archive.returncode != 0:
                print(f"before: git archive {ref} failed: {archive.stderr.decode().strip()}", file=sys.stderr)
                return None
            subprocess.run(["tar", "-x", "--strip-components=1", "-C", dest], input=archive.stdout, check=True)
        env = dict(os.environ, PYTHONPATH=tmp + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, os.path.abspath(__file__), "--engine-only", *_workload_args(args)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=3600)
        if proc.returncode != 0:
            print(f"before: the engine of {ref} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
            return None
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["engine_file"].startswith(tmp), "the subprocess imported the current engine, not the old one"
        return result


def _workload_args(args: argparse.Namespace) -> list[str]:
    return [
        f"--prompt-len={args.prompt_len}",
        f"--batch={args.batch}",
        f"--decode-prompt={args.decode_prompt}",
        f"--decode-tokens={args.decode_tokens}",
        f"--clock={args.clock}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixgate bench roofline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="553fdab", help="git commit whose engine is 'before' ('none' to skip)")
    parser.add_argument("--prompt-len", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--decode-prompt", type=int, default=128)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or this process's CPU time (shared machines)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--engine-only", action="store_true", help=argparse.SUPPRESS)  # the subprocess's mode
    args = parser.parse_args(argv)
    global _clock
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter

    from radixgate.engine.config import num_threads

    if num_threads():
        torch.set_num_threads(num_threads())
    if args.engine_only:
        import radixgate.engine

        result = measure_engine(args.prompt_len, args.batch, args.decode_prompt, args.decode_tokens)
        result["engine_file"] = radixgate.engine.__file__
        print(json.dumps(result))
        return 0

    peaks, bandwidths = [measure_peak_flops()], [measure_bandwidth()]
    before = run_before(args.before, args) if args.before != "none" else None
    after = measure_engine(args.prompt_len, args.batch, args.decode_prompt, args.decode_tokens)
    peaks.append(measure_peak_flops())
    bandwidths.append(measure_bandwidth())
    peak, bw = max(peaks), max(bandwidths)
    shape = model_shape()
    nominal = nominal_peak_flops()
    rows = {"after": figures(after, shape, args, peak, bw)}
    if before is not None:
        rows = {"before": figures(before, shape, args, peak, bw), **rows}
    report = {
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "peak_gflops": [p / 1e9 for p in peaks],
        "bandwidth_gbs": [b / 1e9 for b in bandwidths],
        "nominal_gflops": None if nominal is None else nominal / 1e9,
        "before_ref": args.before if before is not None else None,
        **rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report, args))
    return 0


def format_report(report: dict[str, Any], args: argparse.Namespace) -> str:
    peaks = ", ".join(f"{p:.0f}" for p in report["peak_gflops"])
    bws = ", ".join(f"{b:.1f}" for b in report["bandwidth_gbs"])
    lines = [
        "fraction of this machine's measured matmul and copy speed (best of 5 torch.mm and copy_ calls)",
        f"threads {report['threads']}, {report['clock']} clock; "
        f"measured GFLOP/s (before, after the engines) {peaks}; copy GB/s {bws}",
        f"prefill: one cold {args.prompt_len}-token prompt; decode: {args.batch} requests x "
        f"{args.decode_tokens} tokens after {args.decode_prompt} cached prompt tokens",
        "",
        f"{'':<8}{'prefill tok/s':>14}{'of measured':>12}{'decode tok/s':>13}{'of measured':>12}"
        f"{'step ms':>9}{'ideal ms':>9}{'outside':>9}{'sched':>7}{'build':>7}{'sample+':>8}",
    ]
    for name in ("before", "after"):
        if name not in report:
            continue
        r = report[name]
        lines.append(
            f"{name:<8}{r['prefill_tokens_per_s']:>14.0f}{r['prefill_fraction']:>12.1%}"
            f"{r['decode_tokens_per_s']:>13.0f}{r['decode_fraction']:>12.1%}{r['decode_step_ms']:>9.1f}"
            f"{r['decode_ideal_step_ms']:>9.1f}{r['outside_model_ms']:>9.1f}{r['schedule_ms']:>7.1f}"
            f"{r['batch_build_ms']:>7.1f}{r['sampling_and_rest_ms']:>8.1f}"
        )
    nominal = report.get("nominal_gflops")
    if nominal:
        shares = ", ".join(
            f"{n} {report[n]['prefill_gflops'] / nominal:.1%}" for n in ("before", "after") if n in report
        )
        lines.append(
            f"\nestimated nominal peak {nominal:.0f} GFLOP/s (lscpu: clock x cores x FMA width); "
            f"prefill at {shares} of it"
        )
    if report["before_ref"]:
        lines.append(f"\nbefore = the engine at {report['before_ref']}, run in a subprocess in this same run")
    lines.append(
        "outside = decode step time outside the model's forward: sched + build + sample+ (sampling, bookkeeping)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
