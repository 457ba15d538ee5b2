"""`radixgate bench multi-turn`: chat history kept as generated vs re-tokenized, and the overhead of
cache diagnostics and history keeping.

1. A 10-turn conversation at temperature 1 through the `openai` client, twice on one engine: with
   history keeping (the default) and with `--disable-history-keeping`. Per turn: the tokens the
   previous turn left reusable (its prompt + its completion), the cached tokens of each run, and the
   reason `cache_diagnostics` gives for the run without keeping.
2. Throughput of concurrent multi-turn sessions, side by side in one run, rounds interleaved: with
   `cache_diagnostics` on every request vs none, and history keeping on vs off; printed as ratios.

radixgate bench multi-turn                    # the tiny model, in-process, 16-token pages
radixgate bench multi-turn --turns 10 --sessions 8 --rounds 3 --model PATH
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

SYSTEM = "You are a storyteller. Keep every story short and vivid, and continue it when asked."


@dataclass(frozen=True)
class Turn:
    turn: int
    reusable: int  # the previous turn's prompt + completion tokens (0 on turn 1)
    cached: int
    reason: str | None


def conversation(sdk: Any, turns: int, max_tokens: int, model: str) -> list[Turn]:
    """`sdk`: an `openai.OpenAI` client. Each turn names the previous response in `cache_diagnostics`."""
    tag = uuid.uuid4().hex[:8]
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"[{tag}] {SYSTEM}"}]
    rows: list[Turn] = []
    previous, reusable = None, 0
    for turn in range(1, turns + 1):
        messages.append({"role": "user", "content": f"Turn {turn}: go on with the story of the lighthouse keeper."})
        answer = sdk.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=max_tokens,
            temperature=1.0,
            seed=turn,
            extra_body={"cache_diagnostics": {"previous_response_id": previous}},
        )
        usage = answer.usage
        miss = (answer.model_extra or {})["cache_diagnostics"]["cache_miss_reason"]
        reason = miss["type"] if miss and previous else None
        rows.append(Turn(turn, reusable, usage.prompt_tokens_details.cached_tokens, reason))
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        previous, reusable = answer.id, usage.prompt_tokens + usage.completion_tokens
    return rows


def turn_table(kept: list[Turn], rerendered: list[Turn], page_size: int) -> tuple[str, bool]:
    lines = [
        "| turn | reusable (previous prompt + completion) | cached, history kept | cached, re-tokenized | "
        "reason, re-tokenized |",
        "|---|---|---|---|---|",
    ]
    ok = True
    for k, r in zip(kept, rerendered, strict=True):
        lines.append(f"| {k.turn} | {k.reusable} / {r.reusable} | {k.cached} | {r.cached} | {r.reason or '-'} |")
        ok = ok and (k.turn == 1 or k.cached >= k.reusable - page_size - 1)
    return "\n".join(lines), ok


async def sessions_throughput(
    app: Any, model: str, sessions: int, turns: int, max_tokens: int, diagnostics: bool
) -> tuple[float, float]:
    """Completion tokens per wall second and per CPU second of this process (the engine's threads
    included; steadier than wall time on a shared machine) of `sessions` concurrent multi-turn chats."""
    import httpx

    async def session(client: httpx.AsyncClient) -> int:
        tag = uuid.uuid4().hex[:8]
        messages: list[dict[str, Any]] = [{"role": "system", "content": f"[{tag}] {SYSTEM}"}]
        tokens, previous = 0, None
        for turn in range(turns):
            messages.append({"role": "user", "content": f"Turn {turn}: go on."})
            body: dict[str, Any] = {
                "model": model,
                "messages": messages,
                "max_tokens": max_tokens,
                "seed": turn,
                "ignore_eos": True,  # the same work in every configuration
            }
            if diagnostics:
                body["cache_diagnostics"] = {"previous_response_id": previous}
            answer = (await client.post("/v1/chat/completions", json=body)).raise_for_status().json()
            tokens += answer["usage"]["completion_tokens"]
            messages.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
            previous = answer["id"]
        return tokens

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=600) as client:
        start, cpu = time.perf_counter(), time.process_time()
        counts = await asyncio.gather(*(session(client) for _ in range(sessions)))
        return sum(counts) / (time.perf_counter() - start), sum(counts) / (time.process_time() - cpu)


def overhead(worker: Any, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """Median throughput per configuration over interleaved rounds (the order rotates each round)."""
    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig

    configs = {
        "plain": (GatewayConfig(), False),
        "diagnostics on every request": (GatewayConfig(), True),
        "history keeping off": (GatewayConfig(history_keeping=False), False),
    }
    apps = {name: (create_app(config, worker=worker), diag) for name, (config, diag) in configs.items()}
    names = list(apps)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            app, diag = apps[name]
            worker.flush_cache()
            rate = asyncio.run(
                sessions_throughput(app, worker.model_name, args.sessions, args.session_turns, args.max_tokens, diag)
            )
            results[name].append(rate)
    return {
        name: (statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates))
        for name, rates in results.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixgate bench multi-turn", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=32, help="per turn")
    parser.add_argument("--sessions", type=int, default=8, help="concurrent sessions in the throughput runs")
    parser.add_argument("--session-turns", type=int, default=4, help="turns per session in the throughput runs")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per configuration")
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--model", default="tiny", help="'tiny' or a local Hugging Face checkpoint folder")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    import openai
    from fastapi.testclient import TestClient

    from radixgate.engine import Engine, EngineConfig
    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig
    from radixgate.gateway.workers.worker import LocalWorker

    engine = Engine(EngineConfig(model_path=args.model, device=args.device, page_size=args.page_size))
    try:
        worker = LocalWorker(engine)
        runs = []
        for keeping in (True, False):
            with TestClient(create_app(GatewayConfig(history_keeping=keeping), worker=worker)) as client:
                sdk = openai.OpenAI(
                    base_url=f"{client.base_url}/v1", api_key="unused", http_client=client, max_retries=0
                )
                runs.append(conversation(sdk, args.turns, args.max_tokens, worker.model_name))
        rates = overhead(worker, args)
    finally:
        engine.shutdown()
    text, ok = turn_table(runs[0], runs[1], args.page_size)
    print(f"{args.turns} turns at temperature 1, {args.max_tokens} tokens a turn, page size {args.page_size}:")
    print(text)
    print(f"history kept: every turn cached >= reusable - page size - 1: {'yes' if ok else 'NO'}")
    print()
    print(
        f"throughput, {args.sessions} concurrent sessions x {args.session_turns} turns, median of {args.rounds} rounds:"
    )
    print("| configuration | completion tokens / s | completion tokens / CPU s |")
    print("|---|---|---|")
    for name, (wall, cpu) in rates.items():
        print(f"| {name} | {wall:.1f} | {cpu:.1f} |")
    for label, on, off, target in (
        ("diagnostics on every request / off", "diagnostics on every request", "plain", 0.95),
        ("history keeping on / off", "plain", "history keeping off", 0.98),
    ):
        wall, cpu = (rates[on][k] / rates[off][k] for k in (0, 1))
        print(f"{label}: {wall:.3f} per wall second, {cpu:.3f} per CPU second (target >= {target})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
