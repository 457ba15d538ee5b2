"""`radixgate bench ray`: the router benchmark's workload on the Ray Serve deployment, beside the same
number of local workers, to show that running on Ray keeps the hit rate.

    radixgate bench ray --replicas 2
    radixgate bench ray --replicas 2 --num-requests 48 --template-tokens 400   # quicker

It starts a local Ray cluster kept on loopback (no dashboard, no usage stats), deploys
`radixgate.deploy.ray:app` with `--replicas` engine replicas whose pools hold `--pool-fraction` of the
working set, and drives the workload of `radixgate bench router` (templates with Zipf popularity,
multi-turn sessions, two tenants) through Serve's HTTP proxy. Then the same workload goes through
`radixgate bench router`'s local setup (the same number of `radixgate serve` workers behind a
`cache_aware` front gateway). Both runs print the served hit rate, the ideal (one LRU cache of the
summed capacity), requests/s and TTFT; the last line is the difference of the hit rates.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time

import httpx

from . import router as router_bench


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_on_ray(args: argparse.Namespace, sessions: list, tokenizer: object, pool: int) -> router_bench.PolicyResult:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve

    from radixgate.deploy.ray import app

    with tempfile.TemporaryDirectory(prefix="rg-ray-") as temp_dir:
        ray.init(
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            object_store_memory=80 << 20,
            _temp_dir=temp_dir,
            logging_level="warning",
            log_to_driver=False,
        )
        try:
            port = _free_port()
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            deployment = app(
                {
                    "num_replicas": args.replicas,
                    "num_cpus_per_replica": 0,
                    "engine_args": f"--max-total-tokens {pool}",
                    "api_keys": router_bench.TENANT_KEYS,
                    "admin_api_keys": [router_bench.ADMIN_KEY],
                    "router_policy": "cache_aware",
                }
            )
            serve.run(deployment, name="radixgate", route_prefix="/")
            base = f"http://127.0.0.1:{port}"
            headers = {"Authorization": f"Bearer {router_bench.ADMIN_KEY}"}
            deadline = time.monotonic() + 600
            while True:
                r = httpx.get(f"{base}/workers", headers=headers, timeout=10)
                if r.status_code == 200 and sum(w["healthy"] for w in r.json()["workers"]) == args.replicas:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the Ray replicas did not become healthy within 10 minutes")
                time.sleep(1)
            sampler = router_bench.InflightSampler(base)
            sampler.start()
            sent, results, wall = asyncio.run(
                router_bench.drive(base, sessions, args.concurrency, args.max_tokens, tokenizer)
            )
            sampler.stop.set()
            sampler.join()
            return router_bench.summarize("ray cache_aware", sent, results, wall, sampler, pool * args.replicas)
        finally:
            serve.shutdown()
            ray.shutdown()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="radixgate bench ray", description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=2, help="engine replicas on Ray (and local workers)")
    p.add_argument("--num-requests", type=int, default=96)
    p.add_argument("--num-templates", type=int, default=16)
    p.add_argument("--template-tokens", type=int, default=870)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--user-words", type=int, default=24)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--pool-fraction", type=float, default=0.4)
    p.add_argument("--concurrency", type=int, default=None, help="sessions at once (default 4 per replica)")
    p.add_argument("--max-tokens", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.concurrency = args.concurrency or 4 * args.replicas
    args.skew = False
    args.workers = args.replicas
    args.events = True  # as the Ray replicas publish KV events
    tokenizer = router_bench.load_front_tokenizer("tiny")
    templates = router_bench.make_templates(tokenizer, args.num_templates, args.template_tokens, args.seed)
    sessions = router_bench.make_sessions(args, templates)
    requests = [
        (router_bench.TENANT_KEYS[s.tenant_key], router_bench.prompt_ids(tokenizer, m))
        for s in sessions
        for m in s.turns
    ]
    _, working_set = router_bench.ideal_hit_rate(requests, None)
    pool = int(args.pool_fraction * working_set)
    print(
        f"workload: {len(requests)} requests, working set {working_set} tokens, {args.replicas} engines with "
        f"{pool}-token pools",
        flush=True,
    )
    on_ray = run_on_ray(args, sessions, tokenizer, pool)
    print(f"  ray: hit {on_ray.hit_rate:.3f} (ideal {on_ray.ideal:.3f})", flush=True)
    local = router_bench.run_local(args, sessions, tokenizer, pool, ["cache_aware"])[0]
    router_bench.print_table([on_ray, local], f"{args.replicas} engines: Ray Serve vs local workers")
    print(f"hit rate, Ray minus local: {100 * (on_ray.hit_rate - local.hit_rate):+.1f} points")
    return 0 if on_ray.num_failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
