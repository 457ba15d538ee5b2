"""The template-aware eviction study's simulation: a credit on a returning template's static prefix
keeps it through a flood of one-off prompts that evicts it under lru; credits never leak the pool."""

from __future__ import annotations

from radixgate.bench.retention_template import CANDIDATES, hit_rate


def _workload(rounds: int = 6) -> list[tuple[str, list[int], int]]:
    """Template `t` (a 32-token static prefix and 4 tokens of its own) between bursts of 5 one-off
    40-token prompts of template `u` (no static prefix): 200 tokens, past the 96-token pool."""
    static = list(range(1, 33))
    out: list[tuple[str, list[int], int]] = []
    for r in range(rounds):
        out.append(("t", static + [1000 + 10 * r + i for i in range(4)], 32))
        out += [("u", [5000 + 100 * (5 * r + b) + i for i in range(40)], 0) for b in range(5)]
    return out


def test_the_static_credit_keeps_a_returning_template_through_a_flood() -> None:
    requests = _workload()
    lru = hit_rate(requests, 96, "lru")
    static = hit_rate(requests, 96, "template-static", horizon=64)
    assert lru == 0.0  # each burst evicts t's prefix before it comes back
    # from t's third request on (credited once it had come back), its 32 static tokens hit: 4 of 6
    assert static == 4 * 32 / sum(len(ids) for _, ids, _ in requests)
    assert hit_rate(requests, 96, "template-static", horizon=0) == lru  # no credit: plain lru


def test_every_candidate_keeps_the_pool_whole() -> None:
    """hit_rate asserts at the end that every slot is free or cached and nothing stays locked."""
    for candidate in CANDIDATES:
        assert 0.0 <= hit_rate(_workload(), 96, candidate, horizon=512) <= 1.0


def test_the_engines_template_policy_keeps_what_the_simulated_credit_keeps() -> None:
    """The engine's `template` policy, credited by kvcache/template_credit.py as the gateway credits
    (a template's second request on), gives the simulated candidate's hits on the same flood."""
    requests = _workload()
    assert hit_rate(requests, 96, "template", horizon=64) == hit_rate(requests, 96, "template-static", horizon=64)
    assert hit_rate(requests, 96, "template", horizon=64) > 0.0 == hit_rate(requests, 96, "template", horizon=0)


def test_the_live_run_sends_the_studys_requests_in_its_order_tagged_as_the_sdk_tags() -> None:
    from radixgate.bench.retention_template import preset_requests
    from radixgate.bench.retention_template_live import ordered_turns, tagged_body
    from radixgate.bench.router_presets import PRESETS
    from radixgate.bench.router_workload import prompt_ids
    from radixgate.engine.tiny_tokenizer import load_tiny_tokenizer

    tokenizer, preset = load_tiny_tokenizer(), PRESETS["heldout-16x12"]
    turns = ordered_turns(preset, 100, tokenizer)
    assert [prompt_ids(tokenizer, t) for t in turns] == [ids for _, ids, _ in preset_requests(preset, 100, tokenizer)]
    templates: dict[str, str] = {}
    bodies = [tagged_body(t, templates) for t in turns]
    assert len(templates) == 16 and {b["metadata"]["prompt_template"] for b in bodies} == set(templates.values())
    for body, turn in zip(bodies, turns, strict=True):
        assert body["metadata"]["static_prefix_chars"] == str(len(turn[0]["content"]))
