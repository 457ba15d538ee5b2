"""`radixgate bench offline`'s Hugging Face references: the same requests one at a time and as one
left-padded batch, each row counting every requested token."""

from __future__ import annotations

from radixgate.bench import offline
from radixgate.engine.models.tiny import ensure_tiny_checkpoint


def test_hf_rows_one_at_a_time_and_batched_generate_the_same_requests() -> None:
    path = ensure_tiny_checkpoint()
    prompts = [list(range(1000, 1012)), list(range(2000, 2005)), list(range(3000, 3020))]  # ragged: padding
    single = offline.run_hf(path, prompts, output_len=3)
    batched = offline.run_hf_batched(path, prompts, output_len=3)
    assert (single.name, batched.name) == ("HF generate, one at a time", "HF generate, batched (3 padded)")
    assert single.requests == batched.requests == 3
    assert single.output_tokens == batched.output_tokens == 9  # min_new_tokens: every request gets all 3
    assert 0 < batched.mean_ttft_s <= batched.seconds
