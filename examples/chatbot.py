"""A support chatbot written with the radixgate SDK.

The system prompt is STATIC, the conversation is SESSION, and the user id, the time and the
question are TURN segments: whatever order the code lists them in, the prompt starts with the
same tokens for every user, so the server computes the system prompt once.

    radixgate serve &              # or any OpenAI-compatible server
    python examples/chatbot.py --base-url http://127.0.0.1:30000/v1
"""

from __future__ import annotations

import argparse
import datetime

import radixgate as rg

POLICY = """
You are the support assistant of Northwind, an online shop for outdoor gear.
Answer in at most three sentences, in the customer's language, and never invent an order status.

Returns: unused items can be returned within 30 days of delivery for a full refund. Sale items
can be exchanged but not refunded. Customers print the prepaid label from their account page.
Shipping: standard shipping takes 3 to 5 working days and is free above 50 euros; express
shipping takes 1 to 2 working days and costs 9 euros. We ship to the EU, Norway and Switzerland.
Warranty: tents, backpacks and sleeping bags have a two-year warranty covering seams, zips and
buckles. Damage from misuse, fire or animals is not covered. Ask for a photo of the damage.
Accounts: never ask for a password. To change an e-mail address, the customer confirms from
the old address. Orders placed as a guest can be linked to a new account within 14 days.
Escalation: if the customer is upset twice in a row or mentions a legal claim, offer a call
back from a human agent within one working day and stop answering the claim itself.
"""

SUPPORT = rg.Prompt(rg.system(POLICY), template="northwind-support")


def reply(client: rg.Client, user_id: str, question: str, past: list[dict]) -> tuple[rg.ChatCompletion, dict]:
    """The answer, and the user message exactly as sent: keeping that one in the history lets the
    next turn reuse this whole prompt from the cache."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    prompt = SUPPORT.extend(
        rg.context(f"User id: {user_id}. Current time: {now}."),  # per request: rendered last
        rg.history(past),
        rg.user(question),
    )
    return client.chat(prompt, max_tokens=24, temperature=0.0), prompt.messages()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    args = parser.parse_args()
    conversations = {
        "u-1001": ["Can I return a tent I bought on sale?", "And how long does the exchange take?"],
        "u-2002": ["Do you ship to Switzerland?"],
        "u-3003": ["The zip of my backpack broke after a year. What now?"],
    }
    with rg.Client(base_url=args.base_url) as client:
        for user_id, questions in conversations.items():
            past: list[dict] = []
            for question in questions:
                answer, sent = reply(client, user_id, question, past)
                usage = answer.usage
                print(
                    f"{user_id}: {question}\n  -> {answer.text[:80]!r}\n"
                    f"  prompt {usage.prompt_tokens} tokens, {usage.cached_tokens} from cache ({answer.hit_ratio:.0%})"
                )
                past += [sent, {"role": "assistant", "content": answer.text}]
        stats = client.prompt_stats().get(SUPPORT.template)
        if stats:
            print(f"template {stats.template}: {stats.requests} requests, hit rate {stats.hit_rate:.0%}")


if __name__ == "__main__":
    main()
