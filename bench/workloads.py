"""Workloads for `radixgate bench serving`: deterministic request lists with known shared prefixes.

Each workload is built from seeded pseudo-English text, so two runs send the same bytes. Shared
parts are long (``shared_tokens``, 1,500 cl100k tokens by default) so that caching matters:

    chatbot          one system prompt, a different question per request
    rag              a few long documents, several questions about each
    few-shot         instructions and a fixed list of examples, a different input per request
    agent            tool schemas plus a multi-turn history that grows turn by turn (each turn
                     waits for the previous one of its session)
    tree-of-thought  one problem, branching continuations (each node waits for its parent)
    unique           nothing shared
    gsp              SGLang's generated-shared-prefix: groups of prompts sharing a system prompt
    chatbot-bad      chatbot's content written the bad way: timestamp and user id first

Requests that share a prefix carry a `Prompt`, whose static and shared part is what `warm()`
prefills before the timed run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from radixgate._prompt import Prompt
from radixgate._segments import Message, context, document, examples, history, system, tools, user

__all__ = ["BenchRequest", "Workload", "WORKLOADS", "build_workload", "GspParams"]

_WORDS = (
    "the cache model token request server prefix batch memory page tree node query answer system user "
    "document section policy order customer account invoice shipping return refund warranty product "
    "service support team engineer latency throughput kernel attention layer weight value key block "
    "schedule queue worker gateway metric budget report review change release version feature issue "
    "data table index record field schema format result error retry limit window session history "
    "time date plan task goal step check test case rule note example input output reason summary "
    "and of to in for with on by from as at is are was be will can should must may not all each "
    "every new old first last next other same large small fast slow high low open closed ready"
).split()


def filler(rng: random.Random, num_words: int) -> str:
    """Pseudo-English sentences of about `num_words` cl100k tokens (the words are single tokens)."""
    sentences, remaining = [], num_words
    while remaining > 0:
        length = min(remaining, rng.randint(8, 18))
        words = [rng.choice(_WORDS) for _ in range(length)]
        sentences.append(" ".join(words).capitalize() + ".")
        remaining -= length
    return " ".join(sentences)


def _question(rng: random.Random, num_words: int = 16) -> str:
    return "Question: " + filler(rng, num_words).rstrip(".") + "?"


@dataclass(frozen=True)
class BenchRequest:
    """One request of a workload. `depends_on` is the index of a request that must finish first."""

    prompt: Prompt | Sequence[Message]
    api: str = "chat"  # "chat" or "completion"
    depends_on: int | None = None


@dataclass(frozen=True)
class Workload:
    """A named request list plus the prompts `warm()` prefills before the timed run."""

    name: str
    requests: list[BenchRequest]
    warm: list[Prompt] = field(default_factory=list)


@dataclass(frozen=True)
class GspParams:
    """SGLang's generated-shared-prefix dataset parameters (lengths in tokens)."""

    num_groups: int = 4
    prompts_per_group: int = 8
    system_prompt_len: int = 1500
    question_len: int = 64
    output_len: int = 8


def _chatbot(rng: random.Random, n: int, shared: int) -> Workload:
    base = Prompt(
        system("You are the support assistant of an online shop. " + filler(rng, shared)), template="bench/chatbot"
    )
    requests = [BenchRequest(base.extend(context(f"User id: {1000 + i}"), user(_question(rng)))) for i in range(n)]
    return Workload("chatbot", requests, [base])


def _chatbot_bad(rng: random.Random, n: int, shared: int) -> Workload:
    instructions = "You are the support assistant of an online shop. " + filler(rng, shared)
    requests = []
    for i in range(n):
        stamp = f"2026-11-29T10:{i // 60 % 60:02d}:{i % 60:02d}Z"
        header = f"Current time: {stamp}. User id: {1000 + i}.\n\n"
        requests.append(
            BenchRequest(
                [{"role": "system", "content": header + instructions}, {"role": "user", "content": _question(rng)}]
            )
        )
    return Workload("chatbot-bad", requests)


def _rag(rng: random.Random, n: int, shared: int) -> Workload:
    instructions = system("Answer only from the document below. Quote the sentence you rely on.")
    docs = [
        Prompt(instructions, document(filler(rng, shared), title=f"Document {d}"), template="bench/rag")
        for d in range(max(1, math.ceil(n / 8)))
    ]
    requests = [BenchRequest(docs[i * len(docs) // n].extend(user(_question(rng)))) for i in range(n)]
    return Workload("rag", requests, docs)


def _few_shot(rng: random.Random, n: int, shared: int) -> Workload:
    num_examples = max(1, shared // 60)
    pairs = [(filler(rng, 30), filler(rng, 24)) for _ in range(num_examples)]
    base = Prompt(system("Rewrite each input as a short, polite reply."), examples(pairs), template="bench/few-shot")
    requests = [BenchRequest(base.extend(user("Input: " + filler(rng, 30)))) for _ in range(n)]
    return Workload("few-shot", requests, [base])


def _tool(rng: random.Random, i: int, words: int) -> dict:
    params = {f"arg_{k}": {"type": "string", "description": filler(rng, 10)} for k in range(max(1, words // 14))}
    return {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": filler(rng, 12),
            "parameters": {"type": "object", "properties": params},
        },
    }


def _agent(rng: random.Random, n: int, shared: int, turns: int = 4) -> Workload:
    base = Prompt(
        system("You are an agent. Call tools as JSON, then answer."),
        tools([_tool(rng, i, shared // 10) for i in range(8)]),
        template="bench/agent",
    )
    requests: list[BenchRequest] = []
    num_sessions = max(1, math.ceil(n / turns))
    transcripts: list[list[Message]] = [[] for _ in range(num_sessions)]
    last: list[int | None] = [None] * num_sessions
    for turn in range(turns):
        for s in range(num_sessions):
            if len(requests) == n:
                break
            if turn:  # the previous turn's reply and tool result, scripted so that runs are repeatable
                transcripts[s] += [
                    {"role": "assistant", "content": f'{{"tool": "tool_{turn}", "arg_0": "{s}"}}'},
                    {"role": "user", "content": "Tool result: " + filler(rng, 60)},
                ]
            else:
                transcripts[s].append({"role": "user", "content": _question(rng, 24)})
            requests.append(BenchRequest(base.extend(history(list(transcripts[s]))), depends_on=last[s]))
            last[s] = len(requests) - 1
    return Workload("agent", requests, [base])


def _tree_of_thought(rng: random.Random, n: int, shared: int, branching: int = 3, depth: int = 2) -> Workload:
    nodes_per_tree = sum(branching**d for d in range(depth + 1))
    problems = [
        Prompt(system("Problem: " + filler(rng, shared)), template="bench/tree-of-thought")
        for _ in range(max(1, math.ceil(n / nodes_per_tree)))
    ]
    requests: list[BenchRequest] = []
    for problem in problems:
        frontier: list[tuple[str, int | None]] = [("Let us think step by step.", None)]
        while frontier and len(requests) < n:
            path, parent = frontier.pop(0)
            requests.append(BenchRequest(problem.extend(user(path)), api="completion", depends_on=parent))
            index = len(requests) - 1
            if path.count("\nThought") < depth:
                level = path.count("\nThought") + 1
                frontier += [(f"{path}\nThought {level}.{b}: {filler(rng, 40)}", index) for b in range(branching)]
    return Workload("tree-of-thought", requests[:n], problems)


def _unique(rng: random.Random, n: int, shared: int) -> Workload:
    requests = [
        BenchRequest(
            [
                {"role": "system", "content": f"Case {rng.random():.12f}. " + filler(rng, shared)},
                {"role": "user", "content": _question(rng)},
            ]
        )
        for _ in range(n)
    ]
    return Workload("unique", requests)


def _gsp(rng: random.Random, gsp: GspParams) -> Workload:
    groups = [
        Prompt(system(filler(rng, gsp.system_prompt_len)), template=f"bench/gsp-{g}") for g in range(gsp.num_groups)
    ]
    requests = [
        BenchRequest(g.extend(user(filler(rng, gsp.question_len))))
        for g in groups
        for _ in range(gsp.prompts_per_group)
    ]
    return Workload("gsp", requests, groups)


WORKLOADS = ("chatbot", "rag", "few-shot", "agent", "tree-of-thought", "unique", "gsp", "chatbot-bad")


def build_workload(
    name: str, *, num_prompts: int = 32, shared_tokens: int = 1500, seed: int = 0, gsp: GspParams | None = None
) -> Workload:
    """The workload `name` (one of `WORKLOADS`); `gsp` sizes itself from `gsp`, not `num_prompts`."""
    rng = random.Random(f"{name}:{seed}")
    builders = {
        "chatbot": _chatbot,
        "chatbot-bad": _chatbot_bad,
        "rag": _rag,
        "few-shot": _few_shot,
        "agent": _agent,
        "tree-of-thought": _tree_of_thought,
        "unique": _unique,
    }
    if name == "gsp":
        return _gsp(rng, gsp or GspParams())
    if name not in builders:
        raise ValueError(f"unknown workload {name!r}; choose one of: {', '.join(WORKLOADS)}")
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
    if name == "chatbot-bad":  # the same content as chatbot: same seed stream
        rng = random.Random(f"chatbot:{seed}")
    return builders[name](rng, num_prompts, shared_tokens)
