"""The HiCache benchmark: a multi-turn agent workload whose working set is ~4x the device pool, run
with the device tier only, +host, +disk, and +remote (a Redis every worker shares).

    python -m radixgate.bench.hicache [--conversations 8 --turns 6 --workers 2 --hicache-ratio 2.0]

Each agent conversation starts with a shared system prompt and its own tool context, then every
turn appends a tool/user message and the model's reply. Rounds visit the conversations in a
shuffled order, so a conversation comes back after the others have pushed it out of a small
cache. Each configuration runs `--workers` engines (workers on separate machines: each has its own
device, host and disk tiers; the remote tier is the one thing they share); turn t of conversation
c goes to worker (c + t) % workers, as behind a load balancer without session affinity. Requests
run one at a time (an agent waits for its reply); TTFT is arrival to first token. The engines live
side by side and take the workload's requests in turn, so a machine busy with other work slows
them alike.

Then one line for the remote tier alone: a `--shared-prefix-tokens` prompt computed on worker A is
served to worker B from the store, against B's cold TTFT for a prompt of the same length.

The remote column needs `redis-server` (Debian's; `make redis`): the benchmark starts one on a
free loopback port, or uses `--redis-url`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
from dataclasses import dataclass, replace

import torch

from radixgate.engine.config import EngineConfig, SamplingParams
from radixgate.engine.engine import Engine


@dataclass
class Workload:
    conversations: int = 8
    turns: int = 6
    system_tokens: int = 128
    context_tokens: int = 256
    message_tokens: int = 96
    reply_tokens: int = 8
    seed: int = 0

    @property
    def working_set_tokens(self) -> int:
        per_conv = self.context_tokens + self.turns * (self.message_tokens + self.reply_tokens)
        return self.system_tokens + self.conversations * per_conv


def run_workloads(configs: dict[str, EngineConfig], w: Workload, workers: int = 1, storage: str = "") -> dict:
    """Runs the workload on `workers` fresh engines per configuration, request by request in turn
    across the configurations (so a busy machine slows them alike); returns, per configuration,
    the hit rate, mean TTFT and hit tokens per tier. A configuration with a disk tier gets one
    folder per worker under `storage`."""
    rng = random.Random(w.seed)
    tokens = lambda n: [rng.randrange(1000, 50000) for _ in range(n)]  # noqa: E731
    system = tokens(w.system_tokens)
    contexts = [system + tokens(w.context_tokens) for _ in range(w.conversations)]
    messages = [[tokens(w.message_tokens) for _ in range(w.turns)] for _ in range(w.conversations)]
    orders = [rng.sample(range(w.conversations), w.conversations) for _ in range(w.turns)]
    sampling = SamplingParams(max_new_tokens=w.reply_tokens, temperature=0.0, ignore_eos=True)
    warm_up = tokens(64)

    engines: dict[str, list[Engine]] = {name: [] for name in configs}
    try:
        for name, config in configs.items():
            for i in range(workers):
                if config.hicache_storage_dir:
                    config = replace(config, hicache_storage_dir=os.path.join(storage, f"{name}-{i}"))
                engines[name].append(engine := Engine(config))
                engine.generate(input_ids=[warm_up], sampling=sampling, cache_salt="warm-up")
                engine.flush_cache()
        histories = {name: list(contexts) for name in configs}
        figures = {
            name: {"ttft": [], "prompt": 0, "cached": 0, "by_tier": {"device": 0, "host": 0, "disk": 0, "remote": 0}}
            for name in configs
        }
        for turn, order in enumerate(orders):
            for c in order:
                for name, pool in engines.items():
                    engine = pool[(c + turn) % workers]
                    prompt = histories[name][c] + messages[c][turn]
                    out = engine.generate(input_ids=[prompt], sampling=sampling)[0]
                    histories[name][c] = prompt + out.token_ids
                    f = figures[name]
                    f["ttft"].append(out.times["first_token"] - out.times["arrival"])
                    f["prompt"] += out.prompt_tokens
                    f["cached"] += out.cached_tokens
                    for tier, n in out.cached_tokens_by_tier.items():
                        f["by_tier"][tier] += n
                    if engine.hicache is not None:
                        engine.hicache.drain()  # the next turn may run on another worker
        for pool in engines.values():
            for engine in pool:
                engine.check_idle_invariant()
    finally:
        for pool in engines.values():
            for engine in pool:
                engine.shutdown()
    return {
        name: {
            "requests": len(f["ttft"]),
            "prompt_tokens": f["prompt"],
            "hit_rate": f["cached"] / f["prompt"],
            "mean_ttft_ms": 1000 * statistics.fmean(f["ttft"]),
            "median_ttft_ms": 1000 * statistics.median(f["ttft"]),
            "hit_tokens": f["by_tier"],
        }
        for name, f in figures.items()
    }


def shared_prefix(config: EngineConfig, num_tokens: int, seed: int = 1) -> dict:
    """A `num_tokens` prompt computed on worker A, then served to worker B from the remote store;
    B's cold TTFT is measured on another prompt of the same length first."""
    rng = random.Random(seed)
    prompt, other = ([rng.randrange(1000, 50000) for _ in range(num_tokens)] for _ in range(2))
    sampling = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    ttft = lambda out: out.times["first_token"] - out.times["arrival"]  # noqa: E731
    a, b = Engine(config), Engine(config)
    try:
        cold = b.generate(input_ids=[other], sampling=sampling)[0]
        first = a.generate(input_ids=[prompt], sampling=sampling)[0]
        a.hicache.drain()
        loaded = b.generate(input_ids=[prompt], sampling=sampling)[0]
        a.check_idle_invariant()
        b.check_idle_invariant()
    finally:
        a.shutdown()
        b.shutdown()
    return {
        "prompt_tokens": num_tokens,
        "remote_tokens": loaded.cached_tokens_by_tier["remote"],
        "cold_ttft_ms": 1000 * ttft(cold),
        "remote_ttft_ms": 1000 * ttft(loaded),
        "ttft_ratio": ttft(loaded) / ttft(cold),
        "same_tokens": loaded.token_ids == first.token_ids,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m radixgate.bench.hicache", description=__doc__.split("\n")[0])
    p.add_argument("--model-path", default="tiny")
    p.add_argument("--conversations", type=int, default=8)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--workers", type=int, default=2, help="engines per configuration, turns alternate between them")
    p.add_argument("--device-tokens", type=int, default=None, help="device pool size (default: working set / 4)")
    p.add_argument("--hicache-ratio", type=float, default=2.0, help="host tier size / device pool size")
    p.add_argument("--write-policy", default="write_through")
    p.add_argument("--redis-url", default=None, help="the remote tier's Redis (default: start a redis-server)")
    p.add_argument("--no-remote", action="store_true", help="leave out the remote column")
    p.add_argument("--shared-prefix-tokens", type=int, default=2000, help="the A-to-B line's prompt (0: skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1 keeps timings steady on a shared machine)"
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    w = Workload(conversations=args.conversations, turns=args.turns, seed=args.seed)
    device_tokens = args.device_tokens or max(256, w.working_set_tokens // 4 // 64 * 64)
    base = dict(model_path=args.model_path, max_total_tokens=device_tokens)
    hicache = dict(enable_hicache=True, hicache_ratio=args.hicache_ratio, hicache_write_policy=args.write_policy)
    storage = tempfile.mkdtemp(prefix="radixgate-hicache-bench-")
    server = None
    try:
        configs = {
            "device": EngineConfig(**base),
            "device+host": EngineConfig(**base, **hicache),
            "device+host+disk": EngineConfig(**base, **hicache, hicache_storage_dir=storage),
        }
        url = args.redis_url
        if url is None and not args.no_remote:
            from .redis_server import RedisServer

            server = RedisServer().start()
            url = server.url
        remote = None
        if url is not None:
            extra = json.dumps({"url": url, "key_prefix": f"radixgate-bench-{os.getpid()}:"})
            remote = dict(hicache_storage_backend="redis", hicache_storage_backend_extra_config=extra)
            configs["device+host+disk+remote"] = EngineConfig(**base, **hicache, hicache_storage_dir=storage, **remote)
        results = run_workloads(configs, w, args.workers, storage)
        line = None
        if remote is not None and args.shared_prefix_tokens:
            extra = json.dumps({"url": url, "key_prefix": f"radixgate-bench-{os.getpid()}-prefix:"})
            big = max(device_tokens, 2 * args.shared_prefix_tokens + 64)
            line = shared_prefix(
                EngineConfig(
                    model_path=args.model_path,
                    max_total_tokens=big,
                    enable_hicache=True,
                    hicache_storage_backend="redis",
                    hicache_storage_backend_extra_config=extra,
                ),
                args.shared_prefix_tokens,
            )
    finally:
        shutil.rmtree(storage, ignore_errors=True)
        if server is not None:
            server.close()
    ref = results["device"]
    for r in results.values():
        r["hit_rate_vs_device"] = r["hit_rate"] / ref["hit_rate"] if ref["hit_rate"] else float("inf")
        r["ttft_vs_device"] = r["mean_ttft_ms"] / ref["mean_ttft_ms"]
    if args.json:
        report = {"working_set_tokens": w.working_set_tokens, "device_tokens": device_tokens, "results": results}
        print(json.dumps({**report, "workers": args.workers, "shared_prefix": line}, indent=2))
        return 0
    print(
        f"multi-turn agent workload: {w.conversations} conversations x {w.turns} turns on {args.workers} worker(s), "
        f"working set {w.working_set_tokens} tokens = {w.working_set_tokens / device_tokens:.1f}x a worker's "
        f"device pool ({device_tokens} tokens); host tier {args.hicache_ratio}x device; {args.write_policy}"
    )
    print(
        "| tiers | requests | hit rate | x device | mean TTFT ms | x device | median TTFT ms | "
        "hit tokens device/host/disk/remote |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        t = r["hit_tokens"]
        print(
            f"| {name} | {r['requests']} | {r['hit_rate']:.3f} | {r['hit_rate_vs_device']:.2f} | "
            f"{r['mean_ttft_ms']:.1f} | {r['ttft_vs_device']:.2f} | {r['median_ttft_ms']:.1f} | "
            f"{t['device']}/{t['host']}/{t['disk']}/{t['remote']} |"
        )
    if line is not None:
        print(
            f"shared prefix, worker A -> worker B: {line['prompt_tokens']} tokens, {line['remote_tokens']} from the "
            f"remote store; B's TTFT {line['remote_ttft_ms']:.1f} ms vs cold {line['cold_ttft_ms']:.1f} ms "
            f"({line['ttft_ratio']:.2f}x); same greedy tokens as cold: {'yes' if line['same_tokens'] else 'NO'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
