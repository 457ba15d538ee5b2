"""`radixgate bench retention --part template`: would template-aware eviction beat lru and slru?
A simulation study on the router bench's presets (`bench/router_presets.py`), before any engine
plumbing is built for it.

The candidate: lru with credit. Each request carries a credit of its template, computed only from
what the gateway has measured before the request arrives (its per-template statistics); the nodes
the request inserts or matches keep the highest credit any request gave them, and eviction takes
the smallest `last access + credit` first, so a node of a template whose requests keep coming back
looks `credit` tree-clock ticks younger than it is (the tree's clock moves about twice a request).
Three measures of "keeps coming back", each scaled by a horizon `H` requests:
- `template-hits`: the template's measured hit rate so far (`/v1/prompt_stats`' hit_rate), on
  every node the request touches;
- `template-share`: the template's share of the last 200 requests, times the number of templates
  seen in them (1 for an even spread, above 1 for a popular template), on every node it touches;
- `template-static`: `H` on the nodes of the template's static prefix only (the SDK's
  `static_prefix_chars`, here the system message and its chat markup) once the template has come
  back (a second request of it), nothing on the rest of the prompt.

One engine's tree (page 1) of the preset's pool times its workers (a perfect router), fed the
preset's sessions, `concurrency` of them at a time in round-robin, one request after another; the
hit rate is cached prompt tokens / prompt tokens (all but each prompt's last token can hit). `H` is
chosen on the TUNING presets (seeds 0, 1, 2; the trace presets left out: they carry no templates),
and the REPORTING presets (seed 100) are run once with it.
"""

from __future__ import annotations

import statistics
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

from radixgate.engine.kvcache.template_credit import give_credit

from .router_presets import PRESETS, REPORTING, TUNING, Preset, build, pool_tokens
from .router_workload import prompt_ids, template_tokens
from .trace import PoolTree

HORIZONS = (8, 32, 128, 512)  # H, in requests, tried on the tuning presets
CANDIDATES = ("template-hits", "template-share", "template-static")
SHARE_WINDOW = 200
TICKS_PER_REQUEST = 2  # one match and one insert move the tree's clock


Request = tuple[str, list[int], int]  # (template id, prompt token ids, static prefix tokens)


def ordered_turns(preset: Preset, seed: int, tokenizer: Any) -> list[list[dict[str, str]]]:
    """The preset's chat turns in arrival order: `concurrency` sessions at a time, round-robin."""
    waiting = deque(build(preset, seed, tokenizer).sessions)
    active: deque[deque[list[dict[str, str]]]] = deque()
    out = []
    while waiting or active:
        while waiting and len(active) < preset.concurrency:
            active.append(deque(waiting.popleft()))
        session = active.popleft()
        out.append(session.popleft())
        if session:
            active.append(session)
    return out


def preset_requests(preset: Preset, seed: int, tokenizer: Any) -> list[Request]:
    """The preset's requests in arrival order (`ordered_turns`), as the simulation reads them."""
    static: dict[str, int] = {}

    def request(turn: list[dict[str, str]]) -> Request:
        system = turn[0]["content"]
        if system not in static:
            static[system] = template_tokens(tokenizer, system)
        return system[:80], prompt_ids(tokenizer, turn), static[system]

    return [request(turn) for turn in ordered_turns(preset, seed, tokenizer)]


def hit_rate(requests: Sequence[Request], pool: int, policy: str, horizon: int = 0) -> float:
    """Cached / prompt tokens of one tree of `pool` tokens under `policy` (an engine policy, or a
    candidate with its horizon in requests)."""
    candidate = policy in CANDIDATES
    tree = PoolTree(1, pool, "lru" if candidate else policy)
    engine_credit = policy == "template"  # the engine's policy, credited as the gateway does
    if candidate:
        tree.cache._key = lambda node: node.last_access + node.priority  # lru with credit
    queried = cached = 0
    seen: Counter[str] = Counter()
    hits_by_template: Counter[str] = Counter()
    tokens_by_template: Counter[str] = Counter()
    recent: deque[str] = deque(maxlen=SHARE_WINDOW)
    for template, ids, static in requests:
        credit = 0
        if policy == "template-hits" and tokens_by_template[template]:
            credit = int(horizon * TICKS_PER_REQUEST * hits_by_template[template] / tokens_by_template[template])
        elif policy == "template-share" and recent:
            share = Counter(recent)[template] / len(recent) * len(set(recent))
            credit = int(horizon * TICKS_PER_REQUEST * share)
        static_credit = horizon * TICKS_PER_REQUEST if policy == "template-static" and seen[template] else 0
        hit = tree.serve(ids[:-1], credit, (static, static_credit))  # the last prompt token is always computed
        if engine_credit and seen[template]:  # gateway/generation.py's rule, kvcache/template_credit.py's code
            give_credit(tree.cache, ids[: min(static, len(ids) - 1)], None, horizon, sum(seen.values()) + 1)
        queried, cached = queried + len(ids), cached + hit
        seen[template] += 1
        hits_by_template[template] += hit
        tokens_by_template[template] += len(ids)
        recent.append(template)
    tree.check()
    return cached / max(queried, 1)


def study(tokenizer: Any, role: str, horizons: Sequence[int]) -> dict[str, dict[str, float]]:
    """preset -> column -> hit rate (the mean over the role's seeds); columns lru, slru and each
    candidate at each horizon."""
    out: dict[str, dict[str, float]] = {}
    for preset in PRESETS.values():
        if preset.role != role or preset.family == "trace":
            continue
        rates: dict[str, list[float]] = {}
        for seed in preset.seeds:
            requests = preset_requests(preset, seed, tokenizer)
            pool = pool_tokens(preset, [ids for _, ids, _ in requests]) * preset.workers
            for policy in ("lru", "slru"):
                rates.setdefault(policy, []).append(hit_rate(requests, pool, policy))
            for candidate in CANDIDATES:
                for h in horizons:
                    rates.setdefault(f"{candidate} H={h}", []).append(hit_rate(requests, pool, candidate, h))
        out[preset.name] = {column: statistics.mean(r) for column, r in rates.items()}
    return out


def study_engine(tokenizer: Any, role: str, horizon: int) -> dict[str, float]:
    """preset -> hit rate under the engine's `template` policy, credit given as the gateway gives it."""
    out: dict[str, float] = {}
    for preset in PRESETS.values():
        if preset.role == role and preset.family != "trace":
            rates = []
            for seed in preset.seeds:
                requests = preset_requests(preset, seed, tokenizer)
                pool = pool_tokens(preset, [ids for _, ids, _ in requests]) * preset.workers
                rates.append(hit_rate(requests, pool, "template", horizon))
            out[preset.name] = statistics.mean(rates)
    return out


def _print(table: dict[str, dict[str, float]], title: str) -> None:
    columns = list(next(iter(table.values())))
    print(title)
    print(f"{'preset':<22}" + "".join(f"{c:>22}" for c in columns))
    for name, row in table.items():
        print(f"{name:<22}" + "".join(f"{row[c]:>22.3f}" for c in columns))
    means = {c: statistics.mean(row[c] for row in table.values()) for c in columns}
    print(f"{'mean':<22}" + "".join(f"{means[c]:>22.3f}" for c in columns))


def print_template_study() -> None:
    from radixgate.engine.tiny_tokenizer import load_tiny_tokenizer

    tokenizer = load_tiny_tokenizer()
    tuning = study(tokenizer, TUNING, HORIZONS)
    _print(tuning, "template-aware eviction, TUNING presets (seeds 0, 1, 2; one tree of pool x workers):")
    mean = {c: statistics.mean(row[c] for row in tuning.values()) for c in next(iter(tuning.values()))}
    chosen = {cand: max(HORIZONS, key=lambda h: mean[f"{cand} H={h}"]) for cand in CANDIDATES}
    print(f"chosen on the tuning presets' mean: {chosen}")
    reporting: dict[str, dict[str, float]] = {}
    for cand, h in chosen.items():
        for name, row in study(tokenizer, REPORTING, (h,)).items():
            reporting.setdefault(name, {"lru": row["lru"], "slru": row["slru"]})[f"{cand} H={h}"] = row[f"{cand} H={h}"]
    engine = study_engine(tokenizer, REPORTING, chosen["template-static"])
    for name, rate in engine.items():
        reporting[name][f"template H={chosen['template-static']}"] = rate
    _print(reporting, "REPORTING presets (seed 100), run once with the chosen horizons; `template`: the engine's")
