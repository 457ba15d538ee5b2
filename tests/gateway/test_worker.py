"""LocalWorker details that the routes rely on."""
from __future__ import annotations

from types import SimpleNamespace

from radixgate.gateway.worker import LocalWorker


def test_chat_uses_the_tokenizers_template(worker) -> None:
    text = worker.render_chat([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    assert text == worker.tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}], add_generation_prompt=True,
        tokenize=False)


def test_checkpoint_without_chat_template_gets_a_simple_one() -> None:
    tokenizer = SimpleNamespace(chat_template=None)
    engine = SimpleNamespace(model_name="m", context_len=128, tokenizer=tokenizer)
    text = LocalWorker(engine).render_chat([{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "Hello"}])
    assert text == "<|system|>\nBe brief.\n<|user|>\nHello\n<|assistant|>\n"
