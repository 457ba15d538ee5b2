"""`radixgate bench trace --trace FILE --url URL`: the same Mooncake replay, live, against a running
`radixgate serve` (or a router in front of workers), through its native `/generate`.

Each trace block becomes the same pseudo-random block as in the simulation, folded into the
model's vocabulary (`--vocab-tokens`, token ids 1000 and up), and each request gets one token of
its own after its blocks, so that every block can be served from the cache (an engine always
computes a prompt's last token). Requests go one at a time in arrival order, or at their trace
times divided by `--speedup`. A block counts as hit when the answer's `cached_tokens` covers it.
Beside the live hit rate it prints, for the server's own pool (`max_total_num_tokens` of
`/server_info`, in blocks), the simulated `lru` replay, Belady's optimum and the infinite cache.
Requests longer than the server's context are skipped and counted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

from radixgate.bench.cache_bounds import TraceRequest, belady_hits, infinite_hits

FIRST_TOKEN = 1000


def live_tokens(block: Sequence[int], vocab_tokens: int) -> list[int]:
    return [FIRST_TOKEN + t % vocab_tokens for t in block]


def replay_live(
    client: httpx.Client,
    requests: Sequence[TraceRequest],
    counted: Sequence[bool],
    size: int,
    *,
    vocab_tokens: int = 50_000,
    speedup: float | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Sends the trace to the server behind `client`; returns its hit rate and the references."""
    from radixgate.bench.trace import block_tokens, replay

    info = client.get("/server_info", headers=headers).json()
    context = int(info.get("context_len") or 1 << 30)
    pool_blocks = max(1, int(info["max_total_num_tokens"]) // size)
    prompts = []
    for i, request in enumerate(requests):
        ids = [t for h in request.hash_ids for t in live_tokens(block_tokens(h, size), vocab_tokens)]
        prompts.append(ids + [FIRST_TOKEN + vocab_tokens + i % 1000])  # the request's own last token
    fits = [len(ids) + 1 < context for ids in prompts]  # room for the one token it generates
    sent = [r for r, ok in zip(requests, fits, strict=True) if ok]
    counted = [c for c, ok in zip(counted, fits, strict=True) if ok]
    prompts = [ids for ids, ok in zip(prompts, fits, strict=True) if ok]
    hits = total = 0
    start, first_ms = time.monotonic(), sent[0].timestamp_ms if sent else 0
    for request, count, ids in zip(sent, counted, prompts, strict=True):
        if speedup:
            wait = (request.timestamp_ms - first_ms) / 1000 / speedup - (time.monotonic() - start)
            if wait > 0:
                time.sleep(wait)
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
        r = client.post("/generate", json=body, headers=headers)
        r.raise_for_status()
        if count:
            hits += min(r.json()["meta_info"]["cached_tokens"] // size, len(request.hash_ids))
            total += len(request.hash_ids)
    lru_hits, lru_total = replay(sent, counted, "lru", pool_blocks, size)
    belady, belady_total = belady_hits(sent, counted, pool_blocks)
    infinite, infinite_total = infinite_hits(sent, counted)
    return {
        "pool_blocks": pool_blocks,
        "live": hits / max(total, 1),
        "simulated_lru": lru_hits / max(lru_total, 1),
        "belady": belady / max(belady_total, 1),
        "infinite": infinite / max(infinite_total, 1),
        "counted_blocks": total,
        "skipped_requests": len(requests) - len(sent),
    }
