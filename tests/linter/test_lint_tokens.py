"""The lean cl100k counts the linter reads (`_wire.count_tokens_offline`: the offline ranks alone, no
tiktoken encoder) equal tiktoken's, text for text."""

from __future__ import annotations

from pathlib import Path

import pytest

from radixgate import _wire as tokens
from radixgate._wire import count_tokens as tiktoken_count

ROOT = Path(__file__).resolve().parents[2]

SAMPLES = [
    "",
    "You are a helpful assistant. Answer in three sentences and cite the policy section.",
    "héllo wörld — naïve café, 你好世界, 🙂🙂 and \u200b zero width",
    "  \n\n\t  indented\r\n\r\nlines   \n",
    "<|endoftext|> special-token text counted as plain text <|fim_prefix|>",
    "it's we'll they've I'M YOU'RE 1234567 3.14159 ++--==>> {placeholder} {{braces}}",
    "a" * 300 + " " + "ab" * 150,
]


@pytest.mark.parametrize("text", SAMPLES)
def test_counts_equal_tiktokens(text: str) -> None:
    assert tokens.count_tokens_offline(text) == tiktoken_count(text)


def test_counts_equal_tiktokens_on_this_projects_sources() -> None:
    # Slices of real code and prose: identifiers, indentation, docstrings, non-ASCII punctuation.
    texts = []
    for path in sorted((ROOT / "linter").rglob("*.py"))[:12] + [ROOT / "docs" / "rules.md"]:
        source = path.read_text(encoding="utf-8")
        texts += [source[i : i + 1 + i % 700] for i in range(0, len(source), 1500)]
    assert len(texts) > 50
    assert [tokens.count_tokens_offline(t) for t in texts] == [tiktoken_count(t) for t in texts]


def test_without_the_offline_vocabulary_counts_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_cl100k_ranks", lambda: None)
    tokens.count_tokens_offline.cache_clear()
    try:
        assert tokens.count_tokens_offline("hello world") is None
    finally:
        tokens.count_tokens_offline.cache_clear()
