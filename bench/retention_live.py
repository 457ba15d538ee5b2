"""`radixgate bench retention --part noisy-neighbour --live`: the noisy neighbour against real
`radixgate serve` processes (the tiny model on a CPU), three ways side by side.

Each way is a fresh server with a keys file of two tenants, `a` and `b` (and an admin key for
`/server_info`), a small pool and 16-token pages. Tenant A cycles a small working set of prompts,
each a shared part of whole pages and a few tokens of its own; per A request, tenant B sends
unique long prompts, `b_in_flight` at a time, while A's request is in flight, so B sends
`b_factor` times the pool per A cycle. A's hit rate is the sum of `usage.prompt_tokens_details.
cached_tokens` over the sum of `prompt_tokens` of its `/v1/completions` answers after the first
cycle (which computes the working set). The ways: A alone, A + B with fair share off, A + B with
it on; the same sizes, the same token ids, each on its own server.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx

from radixgate.gateway.server_process import ServerProcess

KEYS = {"a": "key-tenant-a", "b": "key-tenant-b", "admin": "key-admin"}
VOCAB_END = 100_000  # the tiny model's vocabulary (cl100k) ends a little above
FAIRNESS_FLAGS = {"on": [], "off": ["--disable-tenant-cache-fairness"]}  # fair share is on by default


@dataclass(frozen=True)
class LiveSizes:
    pool: int = 2048  # --max-total-tokens
    page: int = 16
    a_prompts: int = 4  # A's working set: this many prompts ...
    a_shared: int = 64  # ... of this many cacheable tokens (whole pages) ...
    a_own: int = 4  # ... and this many of each request's own
    b_tokens: int = 256  # each of B's unique prompts
    b_factor: int = 4  # B sends this many pools per A cycle
    b_in_flight: int = 2
    cycles: int = 6  # A cycles; the first is warm-up

    @property
    def b_per_a(self) -> int:
        return max(1, self.b_factor * self.pool // (self.b_tokens * self.a_prompts))


@dataclass
class LiveResult:
    name: str
    hit_rate: float
    a_requests: int
    b_tokens: int
    seconds: float
    num_fair_evictions: int | None


def keys_file(folder: Path) -> Path:
    path = folder / "keys.txt"
    path.write_text(f"{KEYS['a']} a\n{KEYS['b']} b\n{KEYS['admin']} ops admin\n", encoding="utf-8")
    return path


def server_args(sizes: LiveSizes, keys: Path, fairness: str) -> list[str]:
    return [
        "--max-total-tokens",
        str(sizes.pool),
        "--page-size",
        str(sizes.page),
        "--api-keys-file",
        str(keys),
        *FAIRNESS_FLAGS[fairness],
    ]


def _complete(client: httpx.Client, tenant: str, ids: Sequence[int]) -> dict[str, Any]:
    body = {"model": "tiny", "prompt": list(ids), "max_tokens": 1, "temperature": 0.0}
    r = client.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {KEYS[tenant]}"})
    if r.status_code != 200:
        raise RuntimeError(f"tenant {tenant}: {r.status_code} {r.text[:300]}")
    usage: dict[str, Any] = r.json()["usage"]
    return usage


def drive(client: httpx.Client, sizes: LiveSizes, with_b: bool, seed: int = 0) -> tuple[float, int, int]:
    """Runs the workload against the server behind `client`: (A's hit rate after the first cycle,
    A's requests counted, B's prompt tokens sent)."""
    rng = random.Random(seed)

    def fresh(n: int) -> list[int]:  # pseudo-random ids: no two prompts of the run share a first page
        return [rng.randrange(1000, VOCAB_END) for _ in range(n)]

    working_set = [fresh(sizes.a_shared) for _ in range(sizes.a_prompts)]
    queried = cached = counted = b_sent = 0
    with ThreadPoolExecutor(max_workers=1 + sizes.b_in_flight) as pool:
        for cycle in range(sizes.cycles):
            for prompt in working_set:
                a = pool.submit(_complete, client, "a", prompt + fresh(sizes.a_own))
                b_prompts = [fresh(sizes.b_tokens) for _ in range(sizes.b_per_a if with_b else 0)]
                b_batches = [b_prompts[i : i + sizes.b_in_flight] for i in range(0, len(b_prompts), sizes.b_in_flight)]
                for batch in b_batches:  # B keeps b_in_flight of its prompts running while A's is served
                    for future in [pool.submit(_complete, client, "b", ids) for ids in batch]:
                        b_sent += future.result()["prompt_tokens"]
                usage = a.result()
                if cycle > 0:
                    queried += usage["prompt_tokens"]
                    cached += usage["prompt_tokens_details"]["cached_tokens"]
                    counted += 1
    return cached / max(queried, 1), counted, b_sent


def run_way(name: str, sizes: LiveSizes, keys: Path, fairness: str, with_b: bool) -> LiveResult:
    start = time.monotonic()
    with ServerProcess(server_args(sizes, keys, fairness)) as server:
        with httpx.Client(base_url=server.base_url, timeout=600.0) as client:
            rate, counted, b_sent = drive(client, sizes, with_b)
            info = client.get("/server_info", headers={"Authorization": f"Bearer {KEYS['admin']}"}).json()
    evictions = info.get("num_fair_evictions")
    return LiveResult(name, rate, counted, b_sent, time.monotonic() - start, evictions)


WAYS = (("A alone", "off", False), ("A + B, fair share off", "off", True), ("A + B, fair share on", "on", True))


def noisy_neighbour_live(sizes: LiveSizes = LiveSizes()) -> list[LiveResult]:
    with TemporaryDirectory() as folder:
        keys = keys_file(Path(folder))
        return [run_way(name, sizes, keys, fairness, with_b) for name, fairness, with_b in WAYS]


def print_noisy_neighbour_live(sizes: LiveSizes = LiveSizes()) -> None:
    print(
        f"noisy neighbour, live (radixgate serve, tiny model): pool {sizes.pool} tokens, page {sizes.page}; "
        f"A cycles {sizes.a_prompts} prompts of {sizes.a_shared} shared + {sizes.a_own} own tokens; per A request "
        f"B sends {sizes.b_per_a} unique {sizes.b_tokens}-token prompts, {sizes.b_in_flight} in flight "
        f"({sizes.b_per_a * sizes.b_tokens * sizes.a_prompts / sizes.pool:.0f}x the pool per A cycle); "
        f"{sizes.cycles} A cycles, the first not counted"
    )
    results = noisy_neighbour_live(sizes)
    alone = results[0].hit_rate
    print(f"{'run':<26}{'A hit rate':>11}{'vs alone':>10}{'A reqs':>8}{'B tokens':>10}{'fair evictions':>16}{'s':>7}")
    for r in results:
        fair = "-" if r.num_fair_evictions is None else str(r.num_fair_evictions)
        print(
            f"{r.name:<26}{r.hit_rate:>11.3f}{r.hit_rate - alone:>+10.3f}{r.a_requests:>8}{r.b_tokens:>10}"
            f"{fair:>16}{r.seconds:>7.0f}"
        )
