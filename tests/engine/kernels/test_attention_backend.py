"""Choosing the attention backend, and the Triton backend end to end (interpreted on CPU)."""

import pytest
import torch

from radixgate.engine import Engine, EngineConfig, SamplingParams
from radixgate.engine.kernels import triton_runtime
from radixgate.engine.kvcache.kv_pool import KVPool
from radixgate.engine.runner.attention import TorchBackend, TritonBackend, create_backend


def _pool(device: str = "cpu") -> KVPool:
    return KVPool(16, 1, 1, 16, torch.float32, device)


def test_auto_is_torch_without_cuda_and_names_are_checked():
    assert isinstance(create_backend("auto", _pool()), TorchBackend)
    assert isinstance(create_backend("torch", _pool()), TorchBackend)
    with pytest.raises(ValueError, match="attention_backend"):
        create_backend("flash", _pool())


def test_triton_without_triton_installed_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(triton_runtime, "HAS_TRITON", False)
    with pytest.raises(ValueError, match="pip install triton"):
        create_backend("triton", _pool())


@pytest.mark.skipif(not triton_runtime.HAS_TRITON, reason="triton is not installed")
def test_triton_backend_generates_the_torch_backends_tokens_with_fp8(device):
    """Greedy tokens agree between backends (FP8 pool, a prefix hit, decode steps); small sizes
    because on CPU every kernel launch runs in Triton's interpreter."""
    greedy = SamplingParams(max_new_tokens=2, temperature=0.0, ignore_eos=True)
    prompts = [list(range(900, 917)), list(range(900, 916)) + [5, 6, 7]]
    tokens = {}
    for backend in ("torch", "triton"):
        engine = Engine(
            EngineConfig(
                attention_backend=backend,
                kv_cache_dtype="fp8_e4m3",
                page_size=16,
                max_total_tokens=512,
                device=str(device),
            )
        )
        assert isinstance(engine.runner.backend, TritonBackend if backend == "triton" else TorchBackend)
        first = engine.generate(input_ids=prompts[:1], sampling=greedy)
        second = engine.generate(input_ids=prompts[1:], sampling=greedy)  # hits the first 16 tokens
        assert second[0].cached_tokens == 16
        tokens[backend] = [o.token_ids for o in first + second]
        engine.shutdown()
    assert tokens["triton"] == tokens["torch"]


def test_fp8_e4m3_before_sm89_falls_back_to_torch(monkeypatch):
    """Triton has no fp8_e4m3 before compute capability 8.9 (compile_check shows it for sm_80)."""
    from types import SimpleNamespace

    import radixgate.engine.runner.attention as attention

    monkeypatch.setattr(attention, "HAS_TRITON", True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    a100_pool = SimpleNamespace(device=torch.device("cuda", 0), dtype=torch.float8_e4m3fn)
    assert isinstance(create_backend("auto", a100_pool), TorchBackend)
    with pytest.raises(ValueError, match="8.9"):
        create_backend("triton", a100_pool)
    e5m2_pool = SimpleNamespace(device=torch.device("cuda", 0), dtype=torch.float8_e5m2)
    assert isinstance(create_backend("auto", e5m2_pool), TritonBackend)
