"""The workload of `radixgate bench router` (and `bench ray`): system-prompt templates with Zipf
popularity, multi-turn sessions of two tenants, and the hit rate an ideal cache reaches on it.

Tenants: by default (`split`) each tenant owns half of the templates (template t belongs to tenant
t % 2), so the prefixes a cache must hold are the templates themselves; with `shared` both tenants
use every template and each (tenant, template) pair is a separate prefix (salted apart).

The working set the pools are sized from is, by default, the reusable prefix set: the tokens of
the distinct (tenant, template) system prompts the sessions use (what a cache must hold to serve
them); `all` counts every distinct prompt token instead, one-off last turns included."""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from radixgate.engine.kvcache.radix_cache import RadixCache, common_prefix_len
from radixgate.gateway.workers.worker import render_chat

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
    split = getattr(args, "tenant_templates", "shared") == "split"
    sessions = []
    for s in range(num_sessions):
        template = rng.choices(range(len(templates)), weights)[0]
        tenant = keys[template % len(keys)] if split else keys[s % len(keys)]
        messages = [{"role": "system", "content": templates[template]}]
        turns = []
        for turn in range(args.turns):
            messages = [*messages, {"role": "user", "content": f"[{s}.{turn}] " + _words(rng, args.user_words)}]
            turns.append(messages)
            messages = [*messages, {"role": "assistant", "content": _words(rng, args.user_words // 2)}]
        sessions.append(Session(tenant, template, turns))
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


def template_tokens(tokenizer: Any, template: str) -> int:
    """Tokens of the prompt prefix every session of `template` shares (system prompt and chat markup)."""
    a = prompt_ids(tokenizer, [{"role": "system", "content": template}, {"role": "user", "content": "a"}])
    b = prompt_ids(tokenizer, [{"role": "system", "content": template}, {"role": "user", "content": "b"}])
    return common_prefix_len(a, b)


def reusable_working_set(tokenizer: Any, templates: list[str], sessions: list[Session]) -> int:
    """Tokens of the distinct (tenant, template) prefixes the sessions use: what a cache must hold."""
    pairs = {(s.tenant_key, s.template) for s in sessions}
    sizes = {t: template_tokens(tokenizer, templates[t]) for _, t in pairs}
    return sum(sizes[t] for _, t in pairs)


@dataclass
class Workload:
    templates: list[str]
    sessions: list[Session]
    requests: list[tuple[str, list[int]]]  # (tenant namespace, prompt ids) in session order
    prefixes: int  # tokens of the reusable prefix set
    distinct: int  # every distinct prompt token
    pool: int  # each worker's KV pool, tokens

    def by_session(self) -> list[list[tuple[str, list[int]]]]:
        out, i = [], 0
        for session in self.sessions:
            out.append(self.requests[i : i + len(session.turns)])
            i += len(session.turns)
        return out


def build_workload(args: argparse.Namespace, tokenizer: Any, seed: int | None = None) -> Workload:
    """Templates, sessions and pool size of the router benchmark for `args` (seed: args.seed unless given)."""
    seed = args.seed if seed is None else seed
    templates = make_templates(tokenizer, args.num_templates, args.template_tokens, seed)
    sessions = make_sessions(argparse.Namespace(**{**vars(args), "seed": seed}), templates)
    requests = [(TENANT_KEYS[s.tenant_key], prompt_ids(tokenizer, m)) for s in sessions for m in s.turns]
    _, distinct = ideal_hit_rate(requests, None)
    prefixes = reusable_working_set(tokenizer, templates, sessions)
    working_set = prefixes if getattr(args, "working_set", "all") == "prefixes" else distinct
    return Workload(templates, sessions, requests, prefixes, distinct, int(args.pool_fraction * working_set))


def print_vs_round_robin(results: Sequence[Any], rps_label: str = "req/s") -> None:
    """cache_aware (and +events) against round robin, for rows with policy, hit_rate and rps."""
    by_name = {r.policy: r for r in results}
    rr = by_name.get("round_robin")
    for name in ("cache_aware", "cache_aware+events"):
        ca = by_name.get(name)
        if rr and ca and rr.hit_rate and rr.rps:
            print(f"{name} vs round_robin: hit x{ca.hit_rate / rr.hit_rate:.2f}, {rps_label} x{ca.rps / rr.rps:.2f}")
