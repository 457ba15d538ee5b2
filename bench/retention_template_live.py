"""`radixgate bench retention --part template --live`: the template study's REPORTING presets sent
to real `radixgate serve` processes (the tiny model on a CPU), one fresh server per eviction policy.

Each server gets the study's pool (the preset's pool times its workers: one engine standing for a
perfect router), `--page-size 1` and `--radix-eviction-policy lru | slru | template`. The preset's
chat turns go to `/v1/chat/completions` in the study's order (`concurrency` sessions at a time,
round-robin, one request after another, so every policy sees the same sequence), each tagged as the
SDK tags a prompt: `metadata.prompt_template` (one per system message) and `static_prefix_chars`
(the system message's length). Under `template` the gateway itself gives a returning template's
static prefix its credit (`gateway/generation.py`); nothing here computes one. The hit rate is the
sum of `usage.prompt_tokens_details.cached_tokens` over the sum of `prompt_tokens`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

from radixgate.gateway.server_process import ServerProcess

from .retention_template import ordered_turns
from .router_presets import PRESETS, REPORTING, pool_tokens
from .router_workload import prompt_ids

POLICIES = ("lru", "slru", "template")
SEED = 100  # the REPORTING seed, as in the simulated study
Turn = list[dict[str, str]]


def tagged_body(turn: Turn, templates: dict[str, str]) -> dict[str, Any]:
    system = turn[0]["content"]
    template = templates.setdefault(system, f"template-{len(templates)}")
    metadata = {"prompt_template": template, "static_prefix_chars": str(len(system))}
    return {"model": "tiny", "messages": turn, "max_tokens": 1, "temperature": 0.0, "metadata": metadata}


def run_policy(policy: str, turns: Sequence[Turn], pool: int) -> tuple[float, float]:
    """(hit rate, seconds) of one fresh server under `policy`."""
    start = time.monotonic()
    args = ["--max-total-tokens", str(pool), "--page-size", "1", "--radix-eviction-policy", policy]
    queried = cached = 0
    templates: dict[str, str] = {}
    with ServerProcess(args) as server, httpx.Client(base_url=server.base_url, timeout=600.0) as client:
        for turn in turns:
            r = client.post("/v1/chat/completions", json=tagged_body(turn, templates))
            if r.status_code != 200:
                raise RuntimeError(f"{policy}: {r.status_code} {r.text[:300]}")
            usage = r.json()["usage"]
            queried += usage["prompt_tokens"]
            cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return cached / max(queried, 1), time.monotonic() - start


def print_template_live(presets: Sequence[str] | None = None) -> None:
    from radixgate.engine.tiny_tokenizer import load_tiny_tokenizer

    tokenizer = load_tiny_tokenizer()
    chosen = [p for p in PRESETS.values() if p.role == REPORTING and p.family != "trace"]
    if presets:
        unknown = sorted(set(presets) - {p.name for p in chosen})
        if unknown:
            raise SystemExit(f"not a REPORTING preset with templates: {', '.join(unknown)}")
        chosen = [p for p in chosen if p.name in presets]
    print(
        f"template-aware eviction, live: one radixgate serve per policy (tiny model, page 1), REPORTING presets "
        f"(seed {SEED}), the study's pool (pool x workers) and order, SDK-tagged chat requests; hit rate (seconds)"
    )
    print(f"{'preset':<22}" + "".join(f"{p:>18}" for p in POLICIES) + f"{'template - lru':>16}")
    rates: dict[str, list[float]] = {p: [] for p in POLICIES}
    for preset in chosen:
        turns = ordered_turns(preset, SEED, tokenizer)
        pool = pool_tokens(preset, [prompt_ids(tokenizer, t) for t in turns]) * preset.workers
        row = {policy: run_policy(policy, turns, pool) for policy in POLICIES}
        for policy, (rate, _) in row.items():
            rates[policy].append(rate)
        cells = "".join(f"{rate:>11.3f} ({s:>3.0f})" for rate, s in row.values())
        print(f"{preset.name:<22}{cells}{row['template'][0] - row['lru'][0]:>+16.3f}", flush=True)
    means = {p: sum(r) / len(r) for p, r in rates.items()}
    print(
        f"{'mean':<22}"
        + "".join(f"{means[p]:>11.3f}{'':>7}" for p in POLICIES)
        + f"{means['template'] - means['lru']:>+16.3f}"
    )
