"""A tool-using agent loop with the radixgate SDK.

Tool schemas are STATIC and serialized canonically (sorted keys, tools ordered by name), so two
processes that build them from dicts in different orders still send the same bytes. The history
grows turn by turn and each turn's prompt starts with the previous turn's, so the cache serves
everything but the newest messages. Tool results here are scripted: the built-in model's weights
are random, so its replies are noise.

    python examples/agent.py --base-url http://127.0.0.1:30000/v1 --turns 4
"""

from __future__ import annotations

import argparse
import json

import radixgate as rg

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_orders",
            "description": "Find a customer's orders by e-mail address or order number.",
            "parameters": {
                "type": "object",
                "required": ["query"],
                "properties": {
                    "query": {"type": "string", "description": "e-mail or order number"},
                    "limit": {"type": "integer", "description": "most results to return"},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_return",
            "description": "Open a return for one item of an order and e-mail the prepaid label.",
            "parameters": {
                "type": "object",
                "required": ["order_id", "sku"],
                "properties": {
                    "order_id": {"type": "string"},
                    "sku": {"type": "string"},
                    "reason": {"type": "string", "enum": ["size", "damaged", "other"]},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_tracking",
            "description": "Carrier, status and expected delivery date of a shipment.",
            "parameters": {"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "string"}}},
        },
    },
]

AGENT = rg.Prompt(
    rg.system(
        "You are Northwind's order agent. To use a tool, answer with one JSON object "
        '{"tool": NAME, "arguments": {...}}. When you have what you need, answer the customer.'
    ),
    rg.tools(TOOLS),
    template="order-agent",
)

SCRIPTED_RESULTS = [
    {"orders": [{"order_id": "NW-4411", "items": [{"sku": "TENT-2P", "status": "delivered"}]}]},
    {"order_id": "NW-4411", "carrier": "DHL", "status": "delivered", "delivered_on": "Monday"},
    {"return_id": "R-981", "label": "sent by e-mail"},
    {"note": "nothing else to do"},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    transcript: list[dict] = [{"role": "user", "content": "My tent arrived with a broken pole, order NW-4411."}]
    with rg.Client(base_url=args.base_url) as client:
        for turn in range(args.turns):
            prompt = AGENT.extend(rg.history(transcript))
            answer = client.chat(prompt, max_tokens=16, temperature=0.0)
            print(
                f"turn {turn + 1}: {answer.usage.prompt_tokens:>4} prompt tokens, "
                f"{answer.usage.cached_tokens:>4} cached ({answer.hit_ratio:.0%})"
            )
            result = SCRIPTED_RESULTS[turn % len(SCRIPTED_RESULTS)]
            transcript += [
                {"role": "assistant", "content": answer.text},
                {"role": "user", "content": "Tool result: " + rg.canonical_json(result)},
            ]
    print(json.dumps({"messages": len(transcript)}))


if __name__ == "__main__":
    main()
