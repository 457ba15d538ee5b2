"""A deliberately cache-hostile chat app, written with the plain `openai` package.

Every prompt here breaks prefix caching in a way the prompt-caching guides warn about; it exists
so that promptlint has something to find and the gateway has something to measure. Do not copy
it. `examples/chatbot.py` and friends show the same app written with `radixgate.Prompt`.

    python examples/bad_app.py --base-url http://127.0.0.1:30000/v1 --requests 8
    promptlint examples/bad_app.py --extend-select KV301

Planted anti-patterns (tests/linter/test_bad_app.py checks each one by code and line):
timestamp and user id before the static system prompt (KV101), a dynamic value at the end of
the system prompt ahead of fixed few-shot messages (KV102), the question before the RAG
document (KV103), `json.dumps` of tools without `sort_keys` (KV201), tool names from a set
(KV202), shuffled few-shot examples (KV203), documents in `os.listdir` order (KV204), a
LangChain-style template with a per-request placeholder first (KV101), and a static prefix far
below the 1,024-token minimum of hosted prompt caches (KV301, opt-in).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import uuid
from datetime import datetime

from openai import OpenAI

INSTRUCTIONS = """You are the support assistant of Acme Online. Answer in at most three sentences.
Quote the policy section you rely on. Never promise refunds above 500 euros; hand those to a
human agent. Never invent order numbers, tracking codes or delivery dates. Be polite and brief."""

TOOLS = [
    {"type": "function", "function": {"name": "lookup_order", "description": "Find an order.",
                                      "parameters": {"type": "object", "properties": {
                                          "order_id": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "refund", "description": "Start a refund.",
                                      "parameters": {"type": "object", "properties": {
                                          "order_id": {"type": "string"},
                                          "amount": {"type": "number"}}}}},
]
TOOL_NAMES = {"lookup_order", "refund", "track_parcel", "change_address"}

FEW_SHOT = [
    {"role": "user", "content": "Where is my parcel?"},
    {"role": "assistant", "content": "Could you give me the order number, please?"},
    {"role": "user", "content": "Can I return shoes after 40 days?"},
    {"role": "assistant", "content": "Returns are accepted within 30 days (policy 4.2)."},
    {"role": "user", "content": "My refund has not arrived. I sent the parcel back two weeks ago."},
    {"role": "assistant", "content": "Refunds are paid within 14 days of the return reaching our "
                                     "warehouse (policy 5.1). Could you give me the return tracking code?"},
]

# A LangChain-style template: filled per request elsewhere, with the date first.
ANSWER_TEMPLATE = """Today is {today}. You are a returns specialist at Acme Online. Explain the
returns policy in plain words, quote the policy section number, and finish by asking whether
the customer wants a return label. Keep the answer under eighty words. Items bought in a sale
follow the same rules; personalised items and gift cards cannot be returned, and refunds go back
to the original payment method within fourteen days of the return arriving at the warehouse."""

QUESTIONS = ["Where is my parcel?", "Can I return a gift?", "How do refunds work?",
             "Do you ship to Norway?"]


def make_docs() -> str:
    """A few policy documents in a scratch folder (the bad app reads them unsorted)."""
    folder = tempfile.mkdtemp(prefix="bad_app_docs_")
    for i, body in enumerate(["Returns: 30 days, unused items, original packaging (policy 4.2).",
                              "Refunds: within 14 days of receiving the return (policy 5.1).",
                              "Shipping: EU only, 2-5 working days (policy 2.3)."]):
        with open(os.path.join(folder, f"policy_{i}.txt"), "w") as f:
            f.write(body)
    return folder


def support_chat(client: OpenAI, model: str, user_id: str, question: str) -> str:
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    examples = list(FEW_SHOT)
    random.shuffle(examples)
    system = (f"Current time: {stamp}. Customer: {user_id}.\n" + INSTRUCTIONS
              + "\nTools: " + json.dumps(TOOLS)
              + "\nYou may call: " + ", ".join(TOOL_NAMES)
              + f"\nRequest id: {uuid.uuid4()}")
    response = client.chat.completions.create(
        model=model, max_tokens=8,
        messages=[{"role": "system", "content": system}, *examples,
                  {"role": "user", "content": question}])
    return response.choices[0].message.content or ""


def rag_answer(client: OpenAI, model: str, docs_dir: str, question: str) -> str:
    documents = []
    for name in os.listdir(docs_dir):
        with open(os.path.join(docs_dir, name)) as f:
            documents.append(f.read())
    context = "\n\n".join(documents)
    response = client.chat.completions.create(
        model=model, max_tokens=8,
        messages=[{"role": "system", "content": "Answer from these documents:\n" + context},
                  {"role": "user", "content": question}])
    return response.choices[0].message.content or ""


def rag_question_first(client: OpenAI, model: str, docs_dir: str, question: str) -> str:
    context = "\n\n".join(open(os.path.join(docs_dir, n)).read() for n in sorted(os.listdir(docs_dir)))
    prompt = f"Question: {question}\n\nAnswer using only these documents:\n{context}"
    response = client.chat.completions.create(
        model=model, max_tokens=8, messages=[{"role": "user", "content": prompt}])
    return response.choices[0].message.content or ""


def templated_answer(client: OpenAI, model: str, question: str) -> str:
    system = ANSWER_TEMPLATE.format(today=datetime.now().isoformat())
    response = client.chat.completions.create(
        model=model, max_tokens=8,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
    return response.choices[0].message.content or ""


def quick_answer(client: OpenAI, model: str, question: str) -> str:
    response = client.chat.completions.create(
        model=model, max_tokens=8,
        messages=[{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": question}])
    return response.choices[0].message.content or ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--requests", type=int, default=8, help="requests to send in total")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    parser.add_argument("--tag", action="store_true",
                        help="tag each request with its call site (radixgate.tagging_http_client), so the "
                             "gateway's /v1/prompt_stats and promptlint --stats can name the line")
    args = parser.parse_args(argv)
    http_client = None
    if args.tag:
        import radixgate
        http_client = radixgate.tagging_http_client(timeout=60.0)
    client = OpenAI(base_url=args.base_url, api_key=args.api_key, timeout=60.0, max_retries=0,
                    http_client=http_client)
    docs_dir = make_docs()
    calls = [
        lambda q: support_chat(client, args.model, f"user-{random.randint(1, 999)}", q),
        lambda q: rag_answer(client, args.model, docs_dir, q),
        lambda q: rag_question_first(client, args.model, docs_dir, q),
        lambda q: templated_answer(client, args.model, q),
        lambda q: quick_answer(client, args.model, q),
    ]
    for i in range(args.requests):
        question = QUESTIONS[i % len(QUESTIONS)]
        answer = calls[i % len(calls)](question)
        print(f"{i + 1:>3} {question!r} -> {answer!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
