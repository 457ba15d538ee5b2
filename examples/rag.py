"""Retrieval-augmented answers with the radixgate SDK: one document, many questions, in parallel.

The document is a SHARED segment, rendered after the static instructions and before the
question, so every question about it reuses its KV. `warm()` prefills the document once before
the fan-out: questions sent in parallel to a cold cache would all compute it.

    python examples/rag.py --base-url http://127.0.0.1:30000/v1
"""

from __future__ import annotations

import argparse
import asyncio

import radixgate as rg

INSTRUCTIONS = """
Answer the question using only the document. Quote the sentence you rely on.
If the document does not contain the answer, say so in one sentence.
"""

DOCUMENT = """
Radix attention keeps the key-value cache of finished requests in a radix tree keyed by token ids.
A new request walks the tree from the root and reuses the longest matching prefix, so only the
tokens after the match are computed. Nodes are split when two requests diverge in the middle of an
edge. Each node holds a reference count of the running requests that use it; a node whose count is
zero is evictable, and eviction removes least recently used leaves first, so shared prefixes near
the root survive longest. The scheduler prefers requests with long cached prefixes when memory is
short, which keeps the hit rate high under load. Pages of the key-value pool are allocated in fixed
sizes; with a page size above one, a match is rounded down to whole pages. Prefix caching pays only
when requests start with the same tokens: a timestamp or a user id at the top of the system prompt
makes every request miss from that point on. Host memory and disk can hold evicted prefixes, so a
prefix that left the device returns at the cost of a copy instead of a recomputation.
"""

QUESTIONS = [
    "What is kept in the radix tree?",
    "Which nodes are evicted first?",
    "What happens to a match when the page size is above one?",
    "Why does a timestamp at the top of the prompt hurt?",
    "Where can evicted prefixes go?",
    "Who invented radix trees?",
]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    args = parser.parse_args()
    base = rg.Prompt(
        rg.system(INSTRUCTIONS), rg.document(DOCUMENT, title="Radix attention notes"), template="rag-notes"
    )
    async with rg.AsyncClient(base_url=args.base_url) as client:
        warm = await client.warm(base)
        print(f"warm-up: prefilled {warm.prompt_tokens if warm else 0} tokens once")
        answers = await asyncio.gather(
            *(client.chat(base.extend(rg.user(q)), max_tokens=16, temperature=0.0) for q in QUESTIONS)
        )
        for question, answer in zip(QUESTIONS, answers, strict=False):
            print(f"{question:<58} {answer.usage.cached_tokens:>4}/{answer.usage.prompt_tokens} tokens cached")
        total = sum(a.usage.prompt_tokens for a in answers)
        print(f"hit rate over the fan-out: {sum(a.usage.cached_tokens for a in answers) / total:.0%}")


if __name__ == "__main__":
    asyncio.run(main())
