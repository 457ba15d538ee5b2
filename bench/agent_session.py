"""`radixgate bench agent-session`: a multi-turn agent over `/v1/responses` and `previous_response_id`.

Each turn sends the previous turn's tool output and a new user message and gets a forced function
call back. A continuation reuses the stored prompt and output token ids, so from turn 2 on the
prefix cache should serve the whole previous prompt and output: the table prints `cached_tokens`
against `previous prompt + previous output` per turn.

radixgate bench agent-session                  # 20 turns on the tiny model, in-process
radixgate bench agent-session --turns 10 --model PATH
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

INSTRUCTIONS = (
    "You are a travel agent. For every city the traveller names, call get_weather with the city, "
    "then plan the next leg of the trip from the forecast. Keep answers short."
)
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather forecast for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@dataclass(frozen=True)
class Turn:
    turn: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    previous_total: int  # the previous turn's prompt + output tokens (0 on turn 1)

    @property
    def ratio(self) -> float | None:
        return self.cached_tokens / self.previous_total if self.previous_total else None


def run_session(sdk: Any, *, turns: int, model: str = "tiny", tag: str = "agent") -> list[Turn]:
    """`sdk`: an `openai.OpenAI` client. One forced tool call per turn, each continuing the last."""
    rows: list[Turn] = []
    previous: Any = None
    for turn in range(1, turns + 1):
        user = {"role": "user", "content": f"[{tag}] Leg {turn}: where next, and how is the weather in city {turn}?"}
        items: list[dict[str, Any]] = [user]
        if previous is not None:
            call = next(o for o in previous.output if o.type == "function_call")
            forecast = f"City {turn - 1}: {10 + turn} C, light wind, {turn * 3} % rain."
            items = [{"type": "function_call_output", "call_id": call.call_id, "output": forecast}, user]
        response = sdk.responses.create(
            model=model,
            instructions=INSTRUCTIONS,
            input=items,
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "name": "get_weather"},
            previous_response_id=previous.id if previous is not None else None,
            max_output_tokens=100,
            temperature=0,
        )
        usage = response.usage
        before = rows[-1].input_tokens + rows[-1].output_tokens if rows else 0
        cached = usage.input_tokens_details.cached_tokens
        rows.append(Turn(turn, usage.input_tokens, cached, usage.output_tokens, before))
        previous = response
    return rows


def table(rows: list[Turn]) -> str:
    lines = [
        "| turn | prompt tokens | cached tokens | previous prompt + output | cached / previous |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
        lines.append(f"| {r.turn} | {r.input_tokens} | {r.cached_tokens} | {r.previous_total} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixgate bench agent-session", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--model", default="tiny", help="'tiny' or a local Hugging Face checkpoint folder")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args(argv)
    import openai
    from fastapi.testclient import TestClient

    from radixgate.engine import Engine, EngineConfig
    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig
    from radixgate.gateway.workers.worker import LocalWorker

    engine = Engine(EngineConfig(model_path=args.model, device=args.device))
    try:
        worker = LocalWorker(engine)
        with TestClient(create_app(GatewayConfig(), worker=worker)) as client:
            sdk = openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=client, max_retries=0)
            rows = run_session(sdk, turns=args.turns, model=worker.model_name)
    finally:
        engine.shutdown()
    print(table(rows))
    low = [r.turn for r in rows if r.ratio is not None and r.ratio < 0.95]
    print(f"turns below 0.95 of the previous prompt + output: {low or 'none'}")
    if args.json:
        print(json.dumps([r.__dict__ for r in rows]))
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
