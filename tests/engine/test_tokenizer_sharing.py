"""load_tokenizer (engine/models/loader.py): one parse per folder; engines get a deep copy of it unless
RADIXGATE_SHARE_TOKENIZER=1 (the test suite's setting), and either way encode the same."""

from __future__ import annotations

import pytest

from radixgate.engine.models.loader import load_tokenizer
from radixgate.engine.models.tiny import ensure_tiny_checkpoint


def test_shared_or_copied_tokenizers_encode_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ensure_tiny_checkpoint()
    monkeypatch.setenv("RADIXGATE_SHARE_TOKENIZER", "1")
    shared = load_tokenizer(path)
    assert load_tokenizer(path) is shared
    monkeypatch.setenv("RADIXGATE_SHARE_TOKENIZER", "0")
    copied = load_tokenizer(path)
    assert copied is not shared and copied is not load_tokenizer(path)
    text = "Refunds within 30 days <|im_start|>user hi<|im_end|>"
    assert copied.encode(text) == shared.encode(text) and len(shared.encode(text)) > 5
