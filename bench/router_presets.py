"""The router's workload family: named presets of `radixgate bench router --preset NAME`, each marked
TUNING or REPORTING, declared before any router weight was chosen from them.

Rules the presets keep:
- weights, thresholds and any other router choice may be measured on TUNING presets (with their
  tuning seeds) only; REPORTING presets are run once per reported figure, with their reporting seed,
  and never to choose anything. `heldout-16x12` is reporting only.
- each worker's pool is a fraction of the preset's *distinct prefix tokens*: the tokens of the prompt
  prefixes that at least two requests share (`reusable_tokens`: a token position counts once, however
  many requests share it; one-off tails need no caching). Small enough that routing matters.
- temperature 0, `max_tokens` 2, no tenants (one namespace: SGLang's router knows none), history
  keeping off on the workers. Every table the bench prints says so.

Families: `single` (multi-template single-turn, uniform or Zipf popularity, shuffled), `multiturn`
(sessions re-sending their history), `rag` (a few large documents under many questions), `agent`
(a growing conversation of tool calls and tool outputs), `skew` (single-turn, one template takes
half the requests: load imbalance against affinity), `trace` (the Mooncake conversation trace,
each 512-token block standing for `block_tokens` tokens, arrival times compressed by `time_factor`).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

TUNING = "tuning"
REPORTING = "reporting"
TUNING_SEEDS = (0, 1, 2)
REPORTING_SEED = 100
TEMPERATURE = 0.0
MAX_TOKENS = 2


@dataclass(frozen=True)
class Preset:
    name: str
    role: str  # TUNING or REPORTING
    family: str  # single | multiturn | rag | agent | skew | trace
    workers: int
    pool_fraction: float  # each worker's pool / the preset's distinct prefix tokens
    concurrency: int  # requests (sessions) in flight
    params: dict[str, Any] = field(default_factory=dict)
    kv_events: bool = True  # radixgate's workers publish KV events (the guess runs as well)
    pool_tokens: int | None = None  # a pool fixed in tokens instead (heldout-16x12: 7,000)

    @property
    def seeds(self) -> tuple[int, ...]:
        return TUNING_SEEDS if self.role == TUNING else (REPORTING_SEED,)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        # ---- TUNING: weights come from these (seeds 0, 1, 2) ----
        Preset("tune-single-uniform", TUNING, "single", 2, 0.5, 8, {"templates": 12, "tokens": 700, "per": 10}),
        Preset(
            "tune-single-zipf",
            TUNING,
            "single",
            2,
            0.35,
            8,
            {"templates": 24, "tokens": 600, "requests": 200, "zipf": 1.0},
        ),
        Preset(
            "tune-multiturn",
            TUNING,
            "multiturn",
            2,
            0.4,
            8,
            {"templates": 12, "tokens": 600, "sessions": 30, "turns": 5, "zipf": 0.8},
        ),
        Preset("tune-rag", TUNING, "rag", 2, 0.5, 8, {"docs": 6, "tokens": 1500, "requests": 120, "zipf": 0.6}),
        Preset(
            "tune-agent",
            TUNING,
            "agent",
            2,
            0.5,
            8,
            {"toolsets": 4, "tokens": 800, "sessions": 24, "turns": 6, "output_words": 60},
        ),
        Preset("tune-skew-4w", TUNING, "skew", 4, 0.4, 16, {"templates": 12, "tokens": 700, "requests": 160}),
        # the trace's requests 2000..3999 (the reporting preset replays 0..1999); the seed shifts the window
        Preset(
            "tune-mooncake",
            TUNING,
            "trace",
            2,
            0.3,
            8,
            {"start": 2000, "requests": 2000, "block_tokens": 8, "time_factor": 20.0},
        ),
        # ---- REPORTING: run once per figure with seed 100, never used to choose anything ----
        Preset(
            "heldout-16x12",
            REPORTING,
            "single",
            2,
            0.46,
            8,
            {"templates": 16, "tokens": 900, "per": 12},
            pool_tokens=7000,
        ),
        Preset(
            "report-zipf-4w",
            REPORTING,
            "single",
            4,
            0.3,
            16,
            {"templates": 32, "tokens": 500, "requests": 256, "zipf": 0.9},
        ),
        Preset(
            "report-multiturn",
            REPORTING,
            "multiturn",
            2,
            0.4,
            8,
            {"templates": 16, "tokens": 870, "sessions": 32, "turns": 6, "zipf": 0.8},
        ),
        Preset(
            "report-rag-4w", REPORTING, "rag", 4, 0.35, 16, {"docs": 8, "tokens": 1200, "requests": 160, "zipf": 0.7}
        ),
        Preset(
            "report-agent",
            REPORTING,
            "agent",
            2,
            0.45,
            8,
            {"toolsets": 6, "tokens": 700, "sessions": 24, "turns": 8, "output_words": 50},
        ),
        Preset("report-skew-4w", REPORTING, "skew", 4, 0.35, 16, {"templates": 16, "tokens": 600, "requests": 192}),
        Preset(
            "mooncake-conv-2000",
            REPORTING,
            "trace",
            2,
            0.3,
            8,
            {"start": 0, "requests": 2000, "block_tokens": 8, "time_factor": 20.0},
        ),
    ]
}


@dataclass
class PresetWorkload:
    """What one preset and seed produce: chat sessions (each a list of turns, each turn the full messages
    re-sent), when each session may start (seconds from the run's start; 0 = at once)."""

    preset: Preset
    seed: int
    sessions: list[list[list[dict[str, str]]]]
    arrivals: list[float]


_SYLLABLES = ["ka", "lo", "mi", "ter", "van", "so", "rel", "pu", "dax", "en", "gor", "fi", "tas", "ul", "bre"]


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(n))


def _texts(tokenizer: Any, num: int, tokens: int, rng: random.Random, label: str) -> list[str]:
    """`num` distinct texts of about `tokens` tokens each."""
    out = []
    for t in range(num):
        text = f"{label} #{t}. Read all of it.\n"
        while len(tokenizer.encode(text, add_special_tokens=False)) < tokens:
            text += _words(rng, 40) + ".\n"
        out.append(text)
    return out


def _popularity(rng: random.Random, n: int, total: int, zipf: float) -> list[int]:
    weights = [1.0 / (i + 1) ** zipf for i in range(n)]
    return rng.choices(range(n), weights, k=total)


def _single(p: dict[str, Any], tokenizer: Any, rng: random.Random, skew: bool) -> list[list[list[dict[str, str]]]]:
    templates = _texts(tokenizer, p["templates"], p["tokens"], rng, "You are assistant")
    if "per" in p:
        picks = [t for t in range(len(templates)) for _ in range(p["per"])]
    elif skew:  # one template takes half of the requests, the rest uniform
        half = p["requests"] // 2
        picks = [0] * half + [rng.randrange(1, len(templates)) for _ in range(p["requests"] - half)]
    else:
        picks = _popularity(rng, len(templates), p["requests"], p["zipf"])
    rng.shuffle(picks)
    return [
        [[{"role": "system", "content": templates[t]}, {"role": "user", "content": f"[{i}] " + _words(rng, 16)}]]
        for i, t in enumerate(picks)
    ]


def _multiturn(p: dict[str, Any], tokenizer: Any, rng: random.Random) -> list[list[list[dict[str, str]]]]:
    templates = _texts(tokenizer, p["templates"], p["tokens"], rng, "You are assistant")
    sessions = []
    for s, t in enumerate(_popularity(rng, len(templates), p["sessions"], p["zipf"])):
        messages = [{"role": "system", "content": templates[t]}]
        turns = []
        for turn in range(p["turns"]):
            messages = [*messages, {"role": "user", "content": f"[{s}.{turn}] " + _words(rng, 16)}]
            turns.append(messages)
            messages = [*messages, {"role": "assistant", "content": _words(rng, 8)}]
        sessions.append(turns)
    return sessions


def _rag(p: dict[str, Any], tokenizer: Any, rng: random.Random) -> list[list[list[dict[str, str]]]]:
    docs = _texts(tokenizer, p["docs"], p["tokens"], rng, "Document")
    system = "Answer from the document below and cite it.\n"
    return [
        [[{"role": "system", "content": system + docs[d]}, {"role": "user", "content": f"Q{i}: " + _words(rng, 20)}]]
        for i, d in enumerate(_popularity(rng, len(docs), p["requests"], p["zipf"]))
    ]


def _agent(p: dict[str, Any], tokenizer: Any, rng: random.Random) -> list[list[list[dict[str, str]]]]:
    toolsets = _texts(tokenizer, p["toolsets"], p["tokens"], rng, "Tools you may call")
    sessions = []
    for s in range(p["sessions"]):
        messages = [
            {"role": "system", "content": toolsets[s % len(toolsets)]},
            {"role": "user", "content": f"task {s}: " + _words(rng, 24)},
        ]
        turns = []
        for turn in range(p["turns"]):
            turns.append(messages)
            call = f'call tool_{rng.randrange(8)}({{"step": {turn}}})'
            messages = [
                *messages,
                {"role": "assistant", "content": call},
                {"role": "user", "content": "tool output: " + _words(rng, p["output_words"])},
            ]
        sessions.append(turns)
    return sessions


def _trace(p: dict[str, Any], trace_path: str, seed: int) -> tuple[list[list[list[dict[str, str]]]], list[float]]:
    from .cache_bounds import load_trace

    start = p["start"] + (500 * seed if seed != REPORTING_SEED else 0)  # tuning seeds shift the window
    requests = load_trace(trace_path, start + p["requests"])[start:]
    blocks: dict[int, str] = {}

    def block_text(h: int) -> str:
        if h not in blocks:  # a fixed text per block id: equal ids, equal text
            blocks[h] = f"<{h}> " + _words(random.Random(h), max(1, p["block_tokens"] // 3)) + "\n"
        return blocks[h]

    t0 = requests[0].timestamp_ms if requests else 0
    sessions = [[[{"role": "user", "content": "".join(block_text(h) for h in r.hash_ids)}]] for r in requests]
    return sessions, [(r.timestamp_ms - t0) / 1000 / p["time_factor"] for r in requests]


def build(preset: Preset, seed: int, tokenizer: Any, trace_path: str | None = None) -> PresetWorkload:
    """The sessions of `preset` with `seed` (a trace preset needs the Mooncake trace's path)."""
    rng = random.Random(seed * 7919 + zlib.crc32(preset.name.encode()))
    p = preset.params
    if preset.family == "trace":
        if not trace_path:
            raise ValueError(f"preset {preset.name} replays the Mooncake conversation trace: give --trace FILE")
        sessions, arrivals = _trace(p, trace_path, seed)
        return PresetWorkload(preset, seed, sessions, arrivals)
    if preset.family in ("single", "skew"):
        sessions = _single(p, tokenizer, rng, preset.family == "skew")
    elif preset.family == "multiturn":
        sessions = _multiturn(p, tokenizer, rng)
    elif preset.family == "rag":
        sessions = _rag(p, tokenizer, rng)
    else:
        sessions = _agent(p, tokenizer, rng)
    return PresetWorkload(preset, seed, sessions, [0.0] * len(sessions))


def reusable_tokens(prompts: Sequence[Sequence[int]]) -> int:
    """Distinct prefix tokens: token positions (a token with its whole prefix) that at least two
    prompts share. The presets' pools are fractions of this."""
    seen: dict[int, int] = {}
    for ids in prompts:
        h = 0
        for token in ids:
            h = hash((h, token))
            seen[h] = seen.get(h, 0) + 1
    return sum(1 for n in seen.values() if n >= 2)


def pool_tokens(preset: Preset, prompts: Sequence[Sequence[int]]) -> int:
    """Each worker's KV pool for `preset` over these prompts."""
    if preset.pool_tokens is not None:
        return preset.pool_tokens
    return max(256, int(preset.pool_fraction * reusable_tokens(prompts)))
