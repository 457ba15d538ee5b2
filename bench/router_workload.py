"""The workload of `radixgate bench router` (and `bench ray`): system-prompt templates with Zipf
popularity, multi-turn sessions of two tenants, and the hit rate an ideal cache reaches on it."""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from typing import Any

from radixgate.engine.kvcache.radix_cache import RadixCache
from radixgate.gateway.worker import render_chat

TENANT_KEYS = {"bench-key-a": "tenant-a", "bench-key-b": "tenant-b"}


@dataclass
class Session:
    tenant_key: str
    template: int
    turns: list[list[dict[str, str]]]  # the messages of each turn (history included)


def _words(rng: random.Random, n: int) -> str:
    syllables = ["ka", "lo", "mi", "ter", "van", "so", "rel", "pu", "dax", "en", "gor", "fi", "tas", "ul", "bre"]
    return " ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(n))


def make_templates(tokenizer: Any, num: int, tokens: int, seed: int) -> list[str]:
    """`num` distinct system prompts of about `tokens` tokens each."""
    rng = random.Random(seed)
    templates = []
    for t in range(num):
        text = f"You are assistant #{t} for product line {t}. Policies follow.\n"
        while len(tokenizer.encode(text, add_special_tokens=False)) < tokens:
            text += _words(rng, 40) + ".\n"
        templates.append(text)
    return templates


def make_sessions(args: argparse.Namespace, templates: list[str]) -> list[Session]:
    rng = random.Random(args.seed + 1)
    weights = [1.0 / (i + 1) ** args.zipf for i in range(len(templates))]
    if args.skew:  # one template takes half of all sessions, the rest keep their Zipf shares
        rest = sum(weights[1:])
        weights = [rest] + weights[1:]
    num_sessions = max(1, args.num_requests // args.turns)
    keys = list(TENANT_KEYS)
    sessions = []
    for s in range(num_sessions):
        template = rng.choices(range(len(templates)), weights)[0]
        messages = [{"role": "system", "content": templates[template]}]
        turns = []
        for turn in range(args.turns):
            messages = [*messages, {"role": "user", "content": f"[{s}.{turn}] " + _words(rng, args.user_words)}]
            turns.append(messages)
            messages = [*messages, {"role": "assistant", "content": _words(rng, args.user_words // 2)}]
        sessions.append(Session(keys[s % len(keys)], template, turns))
    return sessions


def prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The token ids the gateway sends to a worker for these messages."""
    return list(tokenizer.encode(render_chat(tokenizer, messages), add_special_tokens=False))


def ideal_hit_rate(requests: list[tuple[str, list[int]]], capacity: int | None) -> tuple[float, int]:
    """Served hit rate of one LRU radix cache of `capacity` tokens (unbounded: None) fed `requests`
    in order, and the tokens it holds at the end (with no bound: the working set)."""
    cache = RadixCache(1, lambda slots: None)
    hits = total = 0
    for namespace, ids in requests:
        slots, _ = cache.match_prefix(ids[:-1], namespace)  # the engine computes at least the last token
        hits += len(slots)
        total += len(ids)
        cache.insert(ids, range(len(ids)), namespace)
        if capacity is not None and cache.evictable_size > capacity:
            cache.evict(cache.evictable_size - capacity)
    return (hits / total if total else 0.0), cache.evictable_size
