"""`radixgate bench pd-interference`: decode inter-token latency while long prompts keep arriving,
a prefill/decode pair (each worker pinned to a core of its own with `taskset`) against one
co-located server on both cores with mixed chunked prefill, at its default `chunked_prefill_size`
and at each size of `--chunk-sizes` (a sweep: the best p99 among them, marked *, is the co-located
figure to beat), all in one run.

Workload per setup: `--streams` streams decode `--stream-tokens` tokens each (ignore_eos) while
`--long-prompts` prompts of `--long-len` tokens arrive `--gap-s` apart (one output token each).
Printed per setup: the streams' inter-token latency p50 / p99 (the gaps between a stream's
consecutive tokens), throughput (prompt plus output tokens over the workload's wall time), and the
share of the workload's wall time the decoding engine's loop thread (the busiest thread of the
co-located server or of the decode worker) spent runnable but waiting for its core (Linux
schedstat): CPU that other processes took from it, which the server cannot remove and which
stretches its steps; a high figure marks a row measured on a busy machine."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from radixgate.engine.config import EngineConfig
from radixgate.gateway.server_process import ServerProcess

SECRET_ENV = {"RADIXGATE_CACHE_SECRET": "pd-interference-bench-secret-0123"}


class PinnedServer(ServerProcess):
    """`radixgate serve` under `taskset -c CORES`."""

    def __init__(self, cores: str, args: list[str]) -> None:
        super().__init__(args, env=SECRET_ENV)
        self.cores = cores

    @property
    def command(self) -> list[str]:
        return ["taskset", "-c", self.cores, *super().command]


@dataclass(frozen=True)
class Pair:
    """A prefill/decode pair driven straight from the bench, as sglang-router drives one: the same
    body with SGLang's bootstrap fields to both, the answer from the decode worker."""

    prefill_url: str
    decode_url: str
    bootstrap_port: int


Target = str | Pair  # a server's URL (co-located, or a PD router), or a pair


def _paired(target: Target, body: dict[str, Any]) -> tuple[str, threading.Thread | None]:
    """Where the answer comes from, and (for a pair) the prefill half of the request, started."""
    if isinstance(target, str):
        return target, None
    room = random.getrandbits(62)
    body |= {"bootstrap_host": "127.0.0.1", "bootstrap_port": target.bootstrap_port, "bootstrap_room": room}
    half = {**body, "stream": False}
    prefill = threading.Thread(target=lambda: httpx.post(f"{target.prefill_url}/generate", json=half, timeout=600))
    prefill.start()
    return target.decode_url, prefill


def _stream(target: Target, ids: list[int], tokens: int, stamps: list[float]) -> None:
    sampling = {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}
    body: dict[str, Any] = {"input_ids": ids, "stream": True, "sampling_params": sampling}
    url, prefill = _paired(target, body)
    seen = 0
    with httpx.stream("POST", f"{url}/generate", json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                n = len(json.loads(line[5:])["output_ids"])
                stamps.extend([time.perf_counter()] * (n - seen))
                seen = n
    if prefill is not None:
        prefill.join()


def _long(target: Target, ids: list[int]) -> None:
    body: dict[str, Any] = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    url, prefill = _paired(target, body)
    httpx.post(f"{url}/generate", json=body, timeout=600).raise_for_status()
    if prefill is not None:
        prefill.join()


def _threads(pid: int | None) -> dict[str, tuple[int, float]]:
    """Each thread of `pid`: CPU used (clock ticks) and seconds spent runnable but not running
    (schedstat's second field); empty off Linux."""
    out: dict[str, tuple[int, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task") if pid else []
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                waited = int(f.read().split()[1]) / 1e9
        except OSError:  # the thread ended meanwhile
            continue
        out[tid] = (int(fields[11]) + int(fields[12]), waited)  # utime + stime
    return out


def _loop_wait_share(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]], wall: float
) -> float | None:
    """The run-queue wait, as a share of `wall`, of the thread that used the most CPU in between."""
    common = [t for t in after if t in before]
    if not common:
        return None
    busiest = max(common, key=lambda t: after[t][0] - before[t][0])
    return (after[busiest][1] - before[busiest][1]) / wall


def workload(url: Target, args: argparse.Namespace, seed: int, engine_pid: int | None = None) -> dict[str, Any]:
    """`engine_pid`: the process whose loop makes the streams' tokens (its run-queue wait is reported)."""
    rng = random.Random(seed)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(1000, 50000) for _ in range(n)]

    _long(url, prompt(64))  # warm
    stamps: list[list[float]] = [[] for _ in range(args.streams)]
    streams = [
        threading.Thread(target=_stream, args=(url, prompt(128), args.stream_tokens, stamps[i]))
        for i in range(args.streams)
    ]
    threads = _threads(engine_pid)
    start = time.perf_counter()
    for t in streams:
        t.start()
    while min(len(s) for s in stamps) < 2:  # every stream decoding
        if not all(t.is_alive() for t in streams):
            raise RuntimeError(f"a stream ended before it decoded two tokens (see the servers' logs at {url})")
        time.sleep(0.01)
    longs = []
    for _ in range(args.long_prompts):
        longs.append(threading.Thread(target=_long, args=(url, prompt(args.long_len))))
        longs[-1].start()
        time.sleep(args.gap_s)
    for t in streams + longs:
        t.join()
    wall = time.perf_counter() - start
    waited = _loop_wait_share(threads, _threads(engine_pid), wall)
    gaps = sorted(b - a for s in stamps for a, b in zip(s, s[1:], strict=False))
    tokens = args.streams * (128 + args.stream_tokens) + args.long_prompts * (args.long_len + 1)
    return {
        "itl_p50_ms": 1000 * gaps[len(gaps) // 2],
        "itl_p99_ms": 1000 * gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))],
        "tokens_per_s": tokens / wall,
        "loop_run_queue_share": waited,
    }


def run_setup(
    servers: list[ServerProcess], url_of: int, args: argparse.Namespace, engine: ServerProcess | None = None
) -> dict[str, Any]:
    """`engine`: the server whose loop makes the streams' tokens (default: the one asked)."""
    for s in servers:
        s.start()
    try:
        process = (engine or servers[url_of]).process
        return workload(servers[url_of].base_url, args, seed=0, engine_pid=process and process.pid)
    finally:
        for s in reversed(servers):
            s.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="radixgate bench pd-interference", description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--stream-tokens", type=int, default=128)
    p.add_argument("--long-prompts", type=int, default=4)
    p.add_argument("--long-len", type=int, default=4096)
    p.add_argument("--gap-s", type=float, default=0.5)
    p.add_argument(
        "--chunk-sizes",
        default="256,512,1024,2048",
        help="co-located chunked_prefill_size values swept besides the default (the default's own is not run twice)",
    )
    p.add_argument("--cores", default="0,1", help="two cores: the pair gets one each, co-located both")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    first, second = args.cores.split(",")
    default = EngineConfig.__dataclass_fields__["chunked_prefill_size"].default
    rows: dict[str, dict[str, Any]] = {}
    sizes = [None, *(int(s) for s in args.chunk_sizes.split(",") if s and int(s) != default)]
    for size in sizes:
        flags = [] if size is None else ["--chunked-prefill-size", str(size)]  # mixed chunks: the engine default
        name = f"co-located, chunked_prefill_size={size or f'{default} (default)'}"
        rows[name] = run_setup([PinnedServer(args.cores, flags)], 0, args)
    bootstrap = 18000 + random.randrange(1000)
    prefill = PinnedServer(
        first, ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bootstrap)]
    )
    decode = PinnedServer(
        second, ["--disaggregation-mode", "decode", "--disaggregation-prefill-bootstrap", f"127.0.0.1:{bootstrap}"]
    )
    try:
        prefill.start()
        decode.start()
        pair = Pair(prefill.base_url, decode.base_url, bootstrap)
        decode_pid = decode.process and decode.process.pid
        rows[f"PD, the bench as router (prefill core {first}, decode {second})"] = workload(pair, args, 0, decode_pid)
        for server in (prefill, decode):  # the same prompts again: from cold caches, as the first time
            httpx.post(f"{server.base_url}/flush_cache", timeout=60).raise_for_status()
        front = PinnedServer(args.cores, ["--prefill", prefill.base_url, str(bootstrap), "--decode", decode.base_url])
        rows[f"PD via radixgate's router (on cores {args.cores})"] = run_setup([front], 0, args, engine=decode)
    finally:
        decode.stop()
        prefill.stop()
    best_name = min((k for k in rows if k.startswith("co-located")), key=lambda k: rows[k]["itl_p99_ms"])
    best = rows[best_name]["itl_p99_ms"]
    pd = min((v for k, v in rows.items() if k.startswith("PD")), key=lambda v: v["itl_p99_ms"])
    ratio = pd["itl_p99_ms"] / best
    if args.json:
        print(json.dumps({"rows": rows, "best_colocated": best_name, "pd_p99_over_best_colocated": ratio}))
        return 0
    print(
        f"{args.streams} streams x {args.stream_tokens} tokens while {args.long_prompts} prompts of "
        f"{args.long_len} tokens arrive {args.gap_s} s apart; cores {args.cores}"
    )
    print(f"{'setup':<52} {'ITL p50 ms':>10} {'ITL p99 ms':>10} {'tok/s':>8} {'loop waited':>11}")
    for k, v in rows.items():
        mark = " *" if k == best_name else ""
        share = v["loop_run_queue_share"]
        waited = "n/a" if share is None else f"{100 * share:.0f}%"
        print(
            f"{k + mark:<52} {v['itl_p50_ms']:>10.1f} {v['itl_p99_ms']:>10.1f} {v['tokens_per_s']:>8.1f} {waited:>11}"
        )
    print(f"best PD p99 / best co-located p99 (*): {ratio:.2f} (the target: at most 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
