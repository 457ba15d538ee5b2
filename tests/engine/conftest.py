"""Engine fixtures: random-weight checkpoints and engines that must end every test idle and leak-free."""

from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(int(os.environ["RADIXGATE_NUM_THREADS"]))


@pytest.fixture(scope="session")
def tiny_path() -> str:
    from radixgate.engine.models.tiny import ensure_tiny_checkpoint

    return ensure_tiny_checkpoint()


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory, tiny_path) -> dict[str, str]:
    """Random-weight Hugging Face checkpoints (written with save_pretrained) covering the
    architectures the engine supports; all share the tiny model's cl100k tokenizer."""
    from transformers import AutoTokenizer

    from radixgate.engine.models.tiny import write_random_checkpoint

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    root = tmp_path_factory.mktemp("ckpt")
    common = dict(
        vocab_size=len(tokenizer),
        tokenizer=tokenizer,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        initializer_range=0.1,
        eos_token_id=tokenizer.eos_token_id,
    )
    paths = {"tiny": tiny_path}
    paths["llama3_gqa"] = write_random_checkpoint(
        str(root / "llama3_gqa"),
        "llama",
        seed=1,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 512,
            "rope_theta": 500000.0,
        },
        **common,
    )
    paths["qwen2_bias"] = write_random_checkpoint(
        str(root / "qwen2_bias"),
        "qwen2",
        seed=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        **common,
    )
    paths["mistral"] = write_random_checkpoint(
        str(root / "mistral"),
        "mistral",
        seed=3,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        sliding_window=None,
        **common,
    )
    return paths


@pytest.fixture
def make_engine():
    """Builds engines for one test; afterwards each must be idle with no page leaked and no lock held."""
    from radixgate.engine import Engine, EngineConfig

    engines = []

    def make(**kwargs) -> Engine:
        kwargs.setdefault("max_total_tokens", 16384)
        engine = Engine(EngineConfig(**kwargs))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        try:
            engine.check_idle_invariant()
        finally:
            engine.shutdown()
