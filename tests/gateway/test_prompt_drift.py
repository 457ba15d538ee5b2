"""Measured drift per template: where a template's requests first differ, mapped to the segment it falls
in, with excerpts only for their own tenant (and none with --disable-prompt-excerpts); bounded."""

from __future__ import annotations

import random
from array import array

from fastapi.testclient import TestClient

import radixgate
from radixgate._wire import TemplateStats
from radixgate.gateway.cli import build_parser
from radixgate.gateway.diagnostics.compare import common_prefix
from radixgate.gateway.observe import drift
from radixgate.gateway.observe.drift import PromptSamples, PromptView, chat_segments
from radixgate.gateway.observe.prompt_stats import PromptStatsRecorder, RequestTags

TOOLS = [
    {"type": "function", "function": {"name": name, "description": f"{name} things", "parameters": {}}}
    for name in ("drift_lookup", "drift_search")
]
ADMIN, KEYS = "admin-key", {"key-a": "tenant-a", "key-b": "tenant-b"}


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _chat(client: TestClient, template: str, messages: list[dict], key: str | None = None, **extra) -> None:
    body = {"model": "tiny", "max_tokens": 1, "messages": messages, "metadata": {"prompt_template": template}}
    r = client.post("/v1/chat/completions", json=body | extra, headers=_auth(key) if key else {})
    assert r.status_code == 200, r.text


def _row(client: TestClient, template: str, key: str | None = None) -> dict:
    rows = client.get("/v1/prompt_stats", headers=_auth(key) if key else {}).json()["templates"]
    return next(r for r in rows if r["template"] == template)


def test_common_prefix_matches_a_plain_loop() -> None:
    rng = random.Random(7)
    for _ in range(200):
        a = [rng.randrange(5) for _ in range(rng.randrange(40))]
        b = a[: rng.randrange(len(a) + 1)] + [rng.randrange(5) for _ in range(rng.randrange(10))]
        expected = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert common_prefix(array("i", a).tobytes(), array("i", b).tobytes()) == expected


def _shared(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_compare_and_keep_matches_a_plain_loop() -> None:
    """Closest kept prompt (the most recent on a tie), where it diverged, and what is kept after."""
    rng = random.Random(5)
    for _ in range(100):
        samples, reference = PromptSamples(), []
        for _ in range(12):
            base = reference[rng.randrange(len(reference))] if reference and rng.random() < 0.8 else []
            ids = base[: rng.randrange(len(base) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(1, 12))]
            found = samples.compare_and_keep(("t", "tpl"), ids)
            if not reference:
                assert found is None
                reference.append(ids)
                continue
            shared = [_shared(ids, e) for e in reference]
            best = max(shared)
            closest = max(i for i, n in enumerate(shared) if n == best)
            earlier = reference[closest]
            assert found is not None and found.earlier == array("i", earlier).tobytes()
            assert found.diverged_at == (None if best >= min(len(earlier), len(ids)) else best)
            if best >= len(earlier):
                reference[closest] = ids
            else:
                reference = (reference + [ids])[-drift.MAX_SAMPLES :]
            assert samples._samples[("t", "tpl")] == [array("i", r).tobytes() for r in reference]


def test_a_system_prompt_that_varies_is_found_in_the_system_segment(client: TestClient, long_prefix) -> None:
    static = long_prefix("drift-system", sentences=10)
    for word in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot"):
        system = f"You are a helpful bot. Request id: {word}. {static}"
        _chat(client, "drift-sys", [{"role": "system", "content": system}, {"role": "user", "content": "hi"}])
    row = _row(client, "drift-sys")
    assert row["compared_requests"] == 5 and row["divergent_requests"] == 5
    (bin_,) = row["divergence"]
    assert (bin_["segment"], bin_["message_index"], bin_["requests"]) == ("system", 0, 5)
    assert "Request id: foxtrot" in bin_["excerpt"] and "Request id: " in bin_["previous"]
    assert TemplateStats.from_json(row).divergence[0].segment == "system"  # promptlint's reader
    assert radixgate.PromptStats.model_validate({"templates": [row]}).get("drift-sys").divergence[0].message_index == 0


def test_the_next_turn_of_a_conversation_does_not_diverge_and_a_new_question_does(client: TestClient) -> None:
    history = [{"role": "system", "content": "Drift bot, turn test."}, {"role": "user", "content": "first question"}]
    _chat(client, "drift-turns", history)
    history += [{"role": "assistant", "content": "an answer"}, {"role": "user", "content": "second question"}]
    _chat(client, "drift-turns", history)  # extends the first prompt: no divergence
    _chat(client, "drift-turns", history[:1] + [{"role": "user", "content": "another first question"}])
    row = _row(client, "drift-turns")
    assert row["compared_requests"] == 2 and row["divergent_requests"] == 1
    (bin_,) = row["divergence"]
    assert (bin_["segment"], bin_["message_index"]) == ("message 1 (user)", 1)
    assert bin_["excerpt"].startswith(("another", " another", "\nanother")) or "another" in bin_["excerpt"]


def test_reordered_tools_are_found_in_the_tools_segment(client: TestClient) -> None:
    messages = [{"role": "system", "content": "Drift tools bot."}, {"role": "user", "content": "use a tool"}]
    _chat(client, "drift-tools", messages, tools=TOOLS)
    _chat(client, "drift-tools", messages, tools=TOOLS[::-1])
    (bin_,) = _row(client, "drift-tools")["divergence"]
    assert bin_["segment"] == "tools" and bin_["message_index"] is None
    assert "drift_search" in bin_["excerpt"] and "drift_lookup" in bin_["previous"]


def test_untagged_requests_count_under_their_prompt_cache_key(client: TestClient) -> None:
    for i in range(2):
        body = {"model": "tiny", "prompt": f"drift raw {i} tail", "max_tokens": 1, "prompt_cache_key": "drift-k"}
        assert client.post("/v1/completions", json=body).status_code == 200
    (bin_,) = _row(client, "prompt_cache_key:drift-k")["divergence"]
    assert bin_["segment"] == "prompt" and bin_["message_index"] is None


def test_a_tenant_sees_only_its_own_excerpts_the_admin_all(make_client) -> None:
    keyed = make_client(api_keys=KEYS, admin_api_keys=frozenset({ADMIN}))
    for key in ("key-a", "key-b"):
        for i in range(2):
            system = f"Drift tenancy bot of {key}, secret {key}-{i}."
            _chat(
                keyed, "drift-tenancy", [{"role": "system", "content": system}, {"role": "user", "content": "q"}], key
            )
    for key in ("key-a", "key-b"):
        rows = keyed.get("/v1/prompt_stats", headers=_auth(key)).json()["templates"]
        other = "key-b" if key == "key-a" else "key-a"
        assert f"{other}-" not in str(rows)  # not a row, a bin or an excerpt of the other tenant
        (bin_,) = _row(keyed, "drift-tenancy", key)["divergence"]
        assert bin_["requests"] == 1 and f"{key}-1" in bin_["excerpt"]
    (merged,) = _row(keyed, "drift-tenancy", ADMIN)["divergence"]  # the admin's view merges the tenants
    assert merged["requests"] == 2 and ("key-a-1" in merged["excerpt"] or "key-b-1" in merged["excerpt"])


def test_disable_prompt_excerpts_keeps_positions_and_no_text(make_client) -> None:
    quiet = make_client(disable_prompt_excerpts=True)
    for i in range(3):
        system = f"Drift quiet bot, secret number {i}{i}{i}."
        _chat(quiet, "drift-quiet", [{"role": "system", "content": system}, {"role": "user", "content": "q"}])
    row = _row(quiet, "drift-quiet")
    assert [(d["segment"], d["requests"], d["excerpt"], d["previous"]) for d in row["divergence"]] == [
        ("system", 2, None, None)
    ]
    assert "secret number" not in quiet.get("/v1/prompt_stats").text
    assert "--disable-prompt-excerpts" in build_parser().format_help()
    assert build_parser().parse_args(["--disable-prompt-excerpts"]).disable_prompt_excerpts


def test_memory_is_bounded_in_templates_prompts_tokens_and_bins() -> None:
    samples = PromptSamples(max_templates=3)
    for t in range(5):
        for i in range(10):
            samples.compare_and_keep(("t", f"tpl{t}"), [t, i] + [7] * (drift.MAX_SAMPLE_TOKENS + 100))
    kept = samples._samples
    assert list(kept) == [("t", "tpl2"), ("t", "tpl3"), ("t", "tpl4")]
    assert all(
        len(v) == drift.MAX_SAMPLES and all(len(p) == 4 * drift.MAX_SAMPLE_TOKENS for p in v) for v in kept.values()
    )
    stats = PromptStatsRecorder()
    for i in range(drift.MAX_BINS + 5):  # each request diverges one token later than the last
        ids = list(range(i)) + [-1 - i, 5, 5]
        stats.record("t", RequestTags("bins"), len(ids), 0, 0, prompt=PromptView(ids, lambda ids: "x" * len(ids)))
    (row,) = stats.snapshot()["templates"]
    assert len(row["divergence"]) == drift.MAX_BINS and row["other_divergences"] == 4
    assert row["divergent_requests"] == drift.MAX_BINS + 4


def test_segments_of_a_rendered_chat() -> None:
    text = '<s>SYS: be brief [tools: {"name": "drift_lookup"}] USER: hi ASSISTANT:'
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    segments = {s.name: (s.start, s.end) for s in chat_segments(text, messages, [TOOLS[0]])}
    assert text[slice(*segments["system"])] == "<s>SYS: be brief"
    assert segments["message 1 (user)"][1] == text.index("hi") + 2
    assert segments["tools"][0] <= text.index("drift_lookup") < segments["tools"][1]


def test_the_dashboard_shows_the_drift_of_each_template(client: TestClient) -> None:
    for word in ("golf", "hotel"):
        _chat(
            client,
            "drift-dash",
            [{"role": "system", "content": f"Drift dashboard {word}."}, {"role": "user", "content": "q"}],
        )
    row = next(r for r in client.get("/dashboard/data").json()["templates"] if r["template"] == "drift-dash")
    assert [(d["segment"], d["requests"]) for d in row["divergence"]] == [("system", 1)]
    page = client.get("/dashboard").text
    assert ">drift</th>" in page and "driftText(r)" in page and "d.excerpt" in page


def test_messages_and_responses_requests_are_segmented_too(client: TestClient) -> None:
    for word in ("india", "juliett"):
        r = client.post(
            "/v1/messages",
            headers={"x-radixgate-prompt-template": "drift-messages"},
            json={
                "model": "tiny",
                "max_tokens": 1,
                "system": f"Drift messages {word}.",
                "messages": [{"role": "user", "content": "q"}],
            },
        )
        assert r.status_code == 200, r.text
        body = {"model": "tiny", "max_output_tokens": 1, "instructions": f"Drift responses {word}.", "input": "q"}
        r = client.post("/v1/responses", json=body | {"metadata": {"prompt_template": "drift-responses"}})
        assert r.status_code == 200, r.text
    for template in ("drift-messages", "drift-responses"):
        (bin_,) = _row(client, template)["divergence"]
        assert (bin_["segment"], bin_["message_index"]) == ("system", 0) and "juliett" in bin_["excerpt"], template
