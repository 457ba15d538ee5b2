"""The shared formats: request metadata, the `/v1/prompt_stats` row, token counting."""

from __future__ import annotations

import pytest

from radixgate._wire import (
    METADATA_KEYS,
    RequestTags,
    TemplateStats,
    count_tokens,
    decode,
    encode,
    prefix_hash,
)


def test_tags_round_trip_through_metadata() -> None:
    tags = RequestTags.for_static_text("bot", "app/bot.py:3", "You are a bot.")
    metadata = tags.to_metadata()
    assert set(metadata) == set(METADATA_KEYS) - {"static_prefix_ttl"}  # sent only with a segment's pin=
    pinned = RequestTags("bot", static_prefix_ttl="1h")
    assert RequestTags.from_metadata(pinned.to_metadata()) == pinned
    assert metadata["static_prefix_chars"] == "14" and metadata["static_prefix_hash"] == prefix_hash("You are a bot.")
    assert RequestTags.from_metadata(metadata) == tags
    assert RequestTags("t").to_metadata() == {"prompt_template": "t"}


def test_reader_truncates_and_drops_junk() -> None:
    tags = RequestTags.from_metadata({"prompt_template": "x" * 500, "static_prefix_chars": "-1", "prompt_source": ""})
    assert len(tags.template) == 200 and tags.static_prefix_chars is None and tags.source is None


def test_row_from_json_coerces_and_ignores_unknown_keys() -> None:
    row = TemplateStats.from_json({"template": "t", "requests": "3", "hit_rate": 1, "mean_ttft_ms": None, "new": 1})
    assert (row.requests, row.hit_rate, row.mean_ttft_ms, row.recomputed_static_tokens) == (3, 1.0, None, 0)
    assert TemplateStats.from_json(row.to_json()) == row
    with pytest.raises(KeyError):
        TemplateStats.from_json({"source": "a.py:1"})
    with pytest.raises(ValueError):
        TemplateStats.from_json({"template": "t", "requests": "many"})
    with pytest.raises(TypeError):
        TemplateStats.from_json({"template": "t", "requests": None})


def test_cl100k_counts() -> None:
    assert count_tokens("hello world") == 2
    assert decode(encode("<|endoftext|> plain")) == "<|endoftext|> plain"
