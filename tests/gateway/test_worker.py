"""LocalWorker details that the routes rely on."""

from __future__ import annotations

from types import SimpleNamespace

from radixgate.gateway.workers.worker import LocalWorker


def test_chat_uses_the_tokenizers_template(worker) -> None:
    """The built-in model's ChatML template, written out: system and user turns, then the assistant's opening."""
    text = worker.render_chat([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    tools = [{"type": "function", "function": {"name": "track", "parameters": {"type": "object"}}}]
    with_tools = worker.render_chat([{"role": "user", "content": "hi"}], tools)
    assert with_tools.startswith("<|im_start|>system\n# Tools\n")  # the tools go in a system turn first
    assert (
        '<tools>\n{"type": "function", "function": {"name": "track", "parameters": {"type": "object"}}}\n</tools>'
        in with_tools
    )
    assert with_tools.endswith("<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_checkpoint_without_chat_template_gets_a_simple_one() -> None:
    tokenizer = SimpleNamespace(chat_template=None)
    engine = SimpleNamespace(model_name="m", context_len=128, tokenizer=tokenizer)
    text = LocalWorker(engine).render_chat(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    )
    assert text == "<|system|>\nBe brief.\n<|user|>\nHello\n<|assistant|>\n"


def test_extreme_sampling_values_are_normalized(client) -> None:
    """Temperatures near 0 overflow the logits and a top_p that rounds to 0 drops every token;
    both would crash the engine loop, so the worker turns them into greedy / a minimal top_p."""
    for extra in ({"temperature": 1e-300}, {"top_p": 1e-300}, {"temperature": 1e-7, "top_p": 1e-40}):
        r = client.post("/v1/completions", json={"model": "tiny", "prompt": "extreme", "max_tokens": 2, **extra})
        assert r.status_code == 200, (extra, r.text)
    assert client.get("/health").status_code == 200


def test_health_reports_a_stopped_engine() -> None:
    from fastapi.testclient import TestClient

    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig

    class Stopped(SimpleNamespace):
        def failure(self) -> str:
            return "engine loop crashed: RuntimeError: boom"

        def stats(self) -> dict:
            return {}

    with TestClient(create_app(GatewayConfig(), worker=Stopped(model_name="m", context_len=8))) as c:
        r = c.get("/health")
        assert r.status_code == 503 and "boom" in r.json()["error"]["message"]
