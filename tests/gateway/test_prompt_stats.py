"""Per-template statistics: the aggregation, and /v1/prompt_stats fed by request metadata."""

from __future__ import annotations

from dataclasses import fields

from fastapi.testclient import TestClient

from radixgate._wire import TemplateStats
from radixgate.gateway.observe.prompt_stats import PromptStatsRecorder, RequestTags, estimate_static_tokens

# The row's fields, from the one place that declares them.
FIELDS = {f.name for f in fields(TemplateStats)}


def test_aggregation_counts_recomputed_static_tokens() -> None:
    stats = PromptStatsRecorder()
    tags = RequestTags("bot", "app/bot.py:42", "h1", 4000)
    stats.record("t", tags, prompt_tokens=1200, cached_tokens=0, static_tokens=1000)
    stats.record("t", tags, prompt_tokens=1200, cached_tokens=1000, static_tokens=1000)
    stats.record("t", RequestTags("bot", "app/bot.py:42", "h2", 4000), 1200, 400, 1000)
    (row,) = stats.snapshot()["templates"]
    assert set(row) == FIELDS and len(FIELDS) == 15
    assert row["requests"] == 3 and row["prompt_tokens"] == 3600 and row["cached_tokens"] == 1400
    assert row["recomputed_static_tokens"] == 1000 + 0 + 600
    assert row["distinct_static_prefixes"] == 2
    assert row["hit_rate"] == round(1400 / 3600, 4)
    assert row["source"] == "app/bot.py:42"


def test_rows_sorted_by_recomputed_static_tokens_and_tenants_filtered() -> None:
    stats = PromptStatsRecorder()
    stats.record("a", RequestTags("small"), 100, 0, 10)
    stats.record("a", RequestTags("big"), 100, 0, 90)
    stats.record("b", RequestTags("secret"), 100, 0, 50)
    assert [r["template"] for r in stats.snapshot()["templates"]] == ["big", "secret", "small"]
    assert [r["template"] for r in stats.snapshot("a")["templates"]] == ["big", "small"]


def test_template_count_is_bounded() -> None:
    stats = PromptStatsRecorder(max_templates=2)
    for name in ("a", "b", "c", "d"):
        stats.record("t", RequestTags(name), 10, 0, 0)
    rows = {r["template"]: r["requests"] for r in stats.snapshot()["templates"]}
    assert rows == {"a": 1, "b": 1, "(other)": 2}


def test_metadata_parsing_tolerates_junk() -> None:
    assert RequestTags.from_metadata(None).template == "(untagged)"
    tags = RequestTags.from_metadata({"prompt_template": "x", "static_prefix_chars": "lots"})
    assert tags.template == "x" and tags.static_prefix_chars is None
    assert RequestTags.from_metadata({"static_prefix_chars": "-3"}).static_prefix_chars is None


def test_static_token_estimate() -> None:
    assert estimate_static_tokens(None, 100, 50) == 0
    assert estimate_static_tokens(50, 100, 40) == 20
    assert estimate_static_tokens(500, 100, 40) == 40
    assert estimate_static_tokens(50, 100, 40, measured=17) == 17


def test_endpoint_reports_templates_from_metadata(client: TestClient, long_prefix) -> None:
    static = long_prefix("stats-endpoint")
    meta = {
        "prompt_template": "support-bot",
        "prompt_source": "app/bot.py:42",
        "static_prefix_hash": "abc",
        "static_prefix_chars": str(len(static)),
    }
    for question in ("q1", "q2", "q3"):
        r = client.post(
            "/v1/completions",
            json={"model": "tiny", "prompt": f"{static} {question}", "max_tokens": 1, "metadata": meta},
        )
        assert r.status_code == 200
    client.post("/v1/completions", json={"model": "tiny", "prompt": "untagged", "max_tokens": 1})
    rows = {r["template"]: r for r in client.get("/v1/prompt_stats").json()["templates"]}
    bot = rows["support-bot"]
    assert set(bot) == FIELDS
    assert bot["requests"] == 3 and bot["source"] == "app/bot.py:42" and bot["distinct_static_prefixes"] == 1
    assert bot["static_prefix_tokens"] > 0.9 * (bot["prompt_tokens"] / 3) - 10
    # computed once, then served from cache (give or take a few tokens other tests cached)
    assert bot["static_prefix_tokens"] - 20 <= bot["recomputed_static_tokens"] <= bot["static_prefix_tokens"] + 10
    assert rows["(untagged)"]["requests"] == 1
    # no prompt text but the drift excerpts: the varying question, a few tokens of context before it
    assert "stats-endpoint" not in client.get("/v1/prompt_stats").text
    assert [(d["requests"], d["segment"]) for d in bot["divergence"]] == [(2, "prompt")]
    assert bot["divergence"][0]["excerpt"].endswith(" q3") and bot["divergence"][0]["previous"].endswith(" q2")


def test_chat_metadata_uses_the_character_ratio(client: TestClient, long_prefix) -> None:
    static = long_prefix("chat-stats", sentences=20)
    meta = {"prompt_template": "chat-t", "static_prefix_chars": str(len(static))}
    client.post(
        "/v1/chat/completions",
        json={
            "model": "tiny",
            "max_tokens": 1,
            "metadata": meta,
            "messages": [{"role": "system", "content": static}, {"role": "user", "content": "dynamic part " * 20}],
        },
    )
    row = next(r for r in client.get("/v1/prompt_stats").json()["templates"] if r["template"] == "chat-t")
    assert 0 < row["static_prefix_tokens"] < row["prompt_tokens"]


def test_untagged_static_parts_rank_by_all_recomputed_tokens_and_ttft_is_averaged() -> None:
    stats = PromptStatsRecorder()
    sdk = RequestTags("fixed", "app/fixed.py:10", "h", 1000)
    plain = RequestTags("bad", "app/bad.py:20", None, None)
    stats.record("t", sdk, prompt_tokens=1200, cached_tokens=1100, static_tokens=1000, ttft=0.010)
    stats.record("t", sdk, prompt_tokens=1200, cached_tokens=0, static_tokens=1000, ttft=0.030)
    stats.record("t", plain, prompt_tokens=1300, cached_tokens=0, static_tokens=0, ttft=0.050)
    rows = stats.snapshot()["templates"]
    assert [r["template"] for r in rows] == ["bad", "fixed"]  # 1300 recomputed beats 1000 static recomputed
    fixed = rows[1]
    assert fixed["recomputed_tokens"] == 1300 and fixed["recomputed_static_tokens"] == 1000
    assert fixed["mean_ttft_ms"] == 20.0 and rows[0]["mean_ttft_ms"] == 50.0
