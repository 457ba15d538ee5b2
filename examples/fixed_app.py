"""`bad_app.py`, fixed: the same five calls and the same content, written with `radixgate.Prompt`.

Each prompt lists its fixed parts (instructions, tools, few-shot examples, documents) as static or
shared segments and its per-request parts (time, user id, question) as turn segments, so every
request starts with the same tokens and the server computes the fixed part once. `radixgate demo`
runs this app after `bad_app.py` and prints both apps' measured hit rates side by side.

    python examples/fixed_app.py --base-url http://127.0.0.1:30000/v1 --requests 10
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from datetime import datetime

import radixgate as rg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bad_app import (
    ANSWER_TEMPLATE,
    FEW_SHOT,
    INSTRUCTIONS,
    QUESTIONS,
    TOOL_NAMES,
    TOOLS,  # noqa: E402
    make_docs,
)

# The template minus its date: the date becomes a turn segment after everything fixed.
RETURNS_SPECIALIST = ANSWER_TEMPLATE.replace("Today is {today}. ", "")
PAIRS = [(FEW_SHOT[i]["content"], FEW_SHOT[i + 1]["content"]) for i in range(0, len(FEW_SHOT), 2)]

SUPPORT = rg.Prompt(
    rg.system(INSTRUCTIONS),
    rg.tools(TOOLS),
    rg.system("You may call: " + ", ".join(sorted(TOOL_NAMES)), name="tool-names"),
    rg.examples(PAIRS),
    template="support_chat.fixed",
)
RETURNS = rg.Prompt(rg.system(RETURNS_SPECIALIST), template="templated_answer.fixed")
QUICK = rg.Prompt(rg.system("You are a helpful assistant."), template="quick_answer.fixed")


def read_docs(docs_dir: str) -> list[rg.Segment]:
    """Documents in a stable order (sorted names), each a shared segment."""
    segments = []
    for name in sorted(os.listdir(docs_dir)):
        with open(os.path.join(docs_dir, name)) as f:
            segments.append(rg.document(f.read(), title=name))
    return segments


def support_prompt(user_id: str, question: str) -> rg.Prompt:
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return SUPPORT.extend(rg.context(f"Current time: {stamp}. Customer: {user_id}."), rg.user(question))


def rag_prompt(docs: list[rg.Segment], question: str, template: str) -> rg.Prompt:
    return rg.Prompt(rg.system("Answer using only these documents."), *docs, rg.user(question), template=template)


def returns_prompt(question: str) -> rg.Prompt:
    return RETURNS.extend(rg.context(f"Today is {datetime.now().isoformat()}."), rg.user(question))


def quick_prompt(question: str) -> rg.Prompt:
    return QUICK.extend(rg.user(question))


def build_prompts(docs_dir: str, num_requests: int, seed: int = 0) -> list[rg.Prompt]:
    """The workload: the same rotation of five calls as bad_app.py."""
    rng = random.Random(seed)
    docs = read_docs(docs_dir)
    builders = [
        lambda q: support_prompt(f"user-{rng.randint(1, 999)}", q),
        lambda q: rag_prompt(docs, q, "rag_answer.fixed"),
        lambda q: rag_prompt(docs, q, "rag_question_first.fixed"),
        returns_prompt,
        quick_prompt,
    ]
    return [builders[i % len(builders)](QUESTIONS[i % len(QUESTIONS)]) for i in range(num_requests)]


def send(client: rg.Client, prompt: rg.Prompt, model: str | None) -> rg.ChatCompletion:
    return client.chat(prompt, model=model, max_tokens=8, temperature=0.0)


def run(client: rg.Client, docs_dir: str, num_requests: int, model: str | None = None) -> list[rg.ChatCompletion]:
    return [send(client, prompt, model) for prompt in build_prompts(docs_dir, num_requests)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    parser.add_argument("--model", default=None)
    parser.add_argument("--requests", type=int, default=10, help="requests to send in total")
    args = parser.parse_args(argv)
    with rg.Client(base_url=args.base_url) as client:
        for i, reply in enumerate(run(client, make_docs(), args.requests, args.model)):
            print(f"{i + 1:>3} cached {reply.usage.cached_tokens}/{reply.usage.prompt_tokens} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
