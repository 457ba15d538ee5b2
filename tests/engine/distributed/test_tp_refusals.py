"""What tensor parallelism refuses, before any rank process starts."""

from __future__ import annotations

import json

import psutil
import pytest

from radixgate.engine import Engine, EngineConfig


def test_query_heads_that_do_not_divide_are_refused_before_anything_starts(tmp_path):
    config = dict(
        architectures=["LlamaForCausalLM"],
        vocab_size=256,
        hidden_size=56,
        intermediate_size=112,
        num_hidden_layers=1,
        num_attention_heads=7,
        num_key_value_heads=7,
    )
    (tmp_path / "config.json").write_text(json.dumps(config))  # no weights: nothing may get as far as loading
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ValueError, match="7 query heads"):
        Engine(EngineConfig(model_path=str(tmp_path), tp_size=2))
    assert {p.pid for p in psutil.Process().children(recursive=True)} == children


def test_settings_that_do_not_combine_with_tp_are_refused():
    with pytest.raises(ValueError, match="tp_size must be an integer >= 1"):
        EngineConfig(tp_size=0)
    EngineConfig(tp_size=2, enable_hicache=True)  # HiCache works under TP (test_tp_hicache.py)
