"""`radixgate demo`: the closed loop on one machine, in about a minute.

1. start `radixgate serve` on the built-in model (a child process on a free port);
2. run `examples/bad_app.py` (plain `openai`, every cache-hostile habit), its requests tagged
   with their call sites;
3. fetch the gateway's `/v1/prompt_stats` and run `promptlint --stats` on the examples: findings
   ranked by the prompt tokens each call site made the server recompute;
4. run `examples/fixed_app.py` (the same app written with `radixgate.Prompt`);
5. print a before/after table: requests, prompt tokens, cached tokens, hit rate, ideal hit rate,
   mean TTFT; then the ideal it computed and the dashboard URL. The ideal is the declared
   static-segment tokens an infinite cache reuses across the requests, computed from the segment
   texts by `demo_ideal` (code neither app runs) with the server's tokenizer; each row's ideal hit
   rate is those tokens over that app's measured prompt tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import httpx

from radixgate.gateway.server_process import ServerProcess

from .demo_ideal import IdealReuse, ideal_reuse

APPS = {"before": "bad_app.py", "after": "fixed_app.py"}


@dataclass
class AppRow:
    label: str
    source: str
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms_total: float = 0.0
    ttft_requests: int = 0
    ideal_hit_rate: float | None = None

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def mean_ttft_ms(self) -> float | None:
        return self.ttft_ms_total / self.ttft_requests if self.ttft_requests else None

    def to_json(self) -> dict:
        return {
            "app": self.label,
            "source": self.source,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "hit_rate": round(self.hit_rate, 4),
            "ideal_hit_rate": self.ideal_hit_rate,
            "mean_ttft_ms": self.mean_ttft_ms,
        }


def app_rows(stats: dict, examples_dir: str) -> dict[str, AppRow]:
    """Sums the gateway's per-template statistics by the example file their call sites are in."""
    rows = {key: AppRow(key, os.path.join(examples_dir, name)) for key, name in APPS.items()}
    for entry in stats.get("templates", []):
        source = str(entry.get("source") or "")
        for key, name in APPS.items():
            if source.rsplit(":", 1)[0].endswith(name):
                row = rows[key]
                row.requests += entry["requests"]
                row.prompt_tokens += entry["prompt_tokens"]
                row.cached_tokens += entry["cached_tokens"]
                if entry.get("mean_ttft_ms") is not None:
                    row.ttft_ms_total += entry["mean_ttft_ms"] * entry["requests"]
                    row.ttft_requests += entry["requests"]
    return rows


def server_encode(base_url: str) -> Callable[[str], list[int]]:
    """The server's own tokenizer (``POST /tokenize``, no special tokens), for the ideal's counts."""

    def encode(text: str) -> list[int]:
        body = {"prompt": text, "add_special_tokens": False}
        response = httpx.post(base_url + "/tokenize", json=body, timeout=30)
        response.raise_for_status()
        return response.json()["tokens"]

    return encode


def run_app(name: str, examples_dir: str, base_url: str, num_requests: int, extra: list[str]) -> float:
    """Runs one example app from a cold cache (so neither app profits from the other's prefixes)."""
    httpx.post(base_url.removesuffix("/v1") + "/flush_cache", timeout=30).raise_for_status()
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            os.path.join(examples_dir, name),
            "--base-url",
            base_url,
            "--requests",
            str(num_requests),
            *extra,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def run_promptlint(stats_file: str, paths: list[str], fmt: str = "text") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "radixgate.linter", "--stats", stats_file, "--format", fmt, "--exit-zero", *paths],
        capture_output=True,
        text=True,
        check=False,
    )


def ideal_line(ideal: IdealReuse) -> str:
    return (
        f"ideal: {ideal.reused_tokens:,} of {ideal.static_tokens:,} declared static-segment tokens reused across "
        f"{ideal.requests} requests under an infinite cache\n(from the segment texts by "
        "radixgate.bench.demo_ideal; ideal hit rate = those tokens / each app's prompt tokens)"
    )


def print_table(console, rows: dict[str, AppRow]) -> None:
    from rich.table import Table

    table = Table(title="before / after: the same app, cache-hostile vs written with radixgate.Prompt")
    for col in ("app", "requests", "prompt tokens", "cached tokens", "hit rate", "ideal hit rate", "mean TTFT"):
        table.add_column(col, justify="left" if col == "app" else "right")
    for row in rows.values():
        ideal = "—" if row.ideal_hit_rate is None else f"{row.ideal_hit_rate:.1%}"
        ttft = "—" if row.mean_ttft_ms is None else f"{row.mean_ttft_ms:.0f} ms"
        table.add_row(
            f"{row.label}: {row.source}",
            str(row.requests),
            f"{row.prompt_tokens:,}",
            f"{row.cached_tokens:,}",
            f"{row.hit_rate:.1%}",
            ideal,
            ttft,
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="radixgate demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--requests", type=int, default=None, help="requests each app sends (default 40, 8 with --quick)")
    p.add_argument("--quick", action="store_true", help="8 requests per app: the README's sample, in seconds")
    p.add_argument("--url", default=None, help="a running keyless radixgate serve to use instead of starting one")
    p.add_argument("--examples-dir", default="examples", help="where bad_app.py and fixed_app.py are")
    p.add_argument("--model-path", default="tiny")
    p.add_argument("--keep-serving", action="store_true", help="leave the server running until Ctrl-C")
    p.add_argument("--json", metavar="FILE", help="also write the before/after figures and findings here")
    p.add_argument(
        "--screenshot",
        metavar="PNG",
        help="also save the dashboard, both apps' templates in its table (needs Debian's chromium)",
    )
    args = p.parse_args(argv)
    if args.requests is None:
        args.requests = 8 if args.quick else 40
    for name in APPS.values():
        if not os.path.isfile(os.path.join(args.examples_dir, name)):
            p.error(
                f"{os.path.join(args.examples_dir, name)} not found: run from the repository root "
                f"or pass --examples-dir"
            )

    from rich.console import Console

    console = Console()
    server = ServerProcess(["--model-path", args.model_path]) if args.url is None else None
    try:
        if server is not None:
            with console.status("starting radixgate serve"):
                server.start()
        base_url = args.url.rstrip("/") if args.url else server.base_url if server else ""
        api_url = base_url + "/v1"
        console.print(f"[bold]1.[/] radixgate serve is up at {base_url}")
        model = httpx.get(api_url + "/models", timeout=30).json()["data"][0]["id"]
        seconds = run_app(APPS["before"], args.examples_dir, api_url, args.requests, ["--tag", "--model", model])
        console.print(f"[bold]2.[/] examples/{APPS['before']}: {args.requests} requests in {seconds:.1f} s")
        stats = httpx.get(base_url + "/v1/prompt_stats", timeout=30).json()
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="prompt_stats-", delete=False) as f:
            json.dump(stats, f)
        paths = [os.path.join(args.examples_dir, name) for name in APPS.values()]
        lint = run_promptlint(f.name, paths)
        console.print("[bold]3.[/] promptlint --stats (findings ranked by measured recomputed tokens):")
        console.print(lint.stdout.rstrip() or "(no findings)", markup=False, highlight=False)
        if lint.returncode not in (0, 1):
            console.print(f"promptlint failed: {lint.stderr.strip()}", markup=False)
        seconds = run_app(APPS["after"], args.examples_dir, api_url, args.requests, ["--model", model])
        console.print(f"[bold]4.[/] examples/{APPS['after']}: {args.requests} requests in {seconds:.1f} s")
        stats = httpx.get(base_url + "/v1/prompt_stats", timeout=30).json()
        rows = app_rows(stats, args.examples_dir)
        ideal = ideal_reuse(os.path.join(args.examples_dir, APPS["before"]), args.requests, server_encode(base_url))
        for row in rows.values():  # the same reused tokens, over each app's own prompt tokens
            row.ideal_hit_rate = ideal.hit_rate(row.prompt_tokens)
        print_table(console, rows)
        console.print(ideal_line(ideal), markup=False, highlight=False)
        if args.json:
            findings = json.loads(run_promptlint(f.name, paths, "json").stdout or "[]")
            with open(args.json, "w") as out:
                payload = {"rows": [r.to_json() for r in rows.values()], "ideal": asdict(ideal), "findings": findings}
                json.dump(payload, out, indent=2)
        if args.screenshot:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "radixgate.bench.screenshot",
                    args.screenshot,
                    "--url",
                    base_url,
                    "--no-workload",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            console.print(f"dashboard screenshot: {args.screenshot}")
        console.print(f"[bold]5.[/] dashboard: {base_url}/dashboard")
        if args.keep_serving:
            console.print("serving until Ctrl-C")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
