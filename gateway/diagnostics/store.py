"""The per-tenant, bounded store behind `cache_diagnostics` and history keeping.

For each tenant, at most `size` (`--diagnostics-history-size`) of each:
- recent sequences the engine received, by response id and choice: the prompt's token ids plus the
  generated ones (the engine caches both), packed, with the model and the order they finished in;
- generated replies: an assistant message's text (or a tool call's name and canonical arguments) ->
  the token ids the engine generated for it (history.py).

The oldest entry goes first. A lookup sees only the caller's tenant, so another tenant's id answers
exactly as an unknown one. Thread-safe: chat rendering reads the replies off the event loop.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass

RECENT_LIMIT = 64  # recent sequences a request without an id is compared with


@dataclass(frozen=True)
class Received:
    """One sequence the engine received and cached: `ids` packed (compare.packed)."""

    ids: bytes
    num_prompt: int
    model: str
    seq: int  # finishing order, to compare only with what finished before a request started


class DiagnosticsStore:
    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"the diagnostics history size must be >= 0, got {size}")
        self.size = size
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._last_seq = 0
        self._received: dict[str, OrderedDict[tuple[str, int], Received]] = {}
        self._replies: dict[str, OrderedDict[str, tuple[int, ...]]] = {}

    @property
    def last_seq(self) -> int:
        """The last finished sequence: a request starting now compares only with those up to it."""
        return self._last_seq

    def record(self, tenant: str, response_id: str, index: int, ids: bytes, num_prompt: int, model: str) -> None:
        if self.size == 0:
            return
        with self._lock:
            seq = self._last_seq = next(self._seq)
            entries = self._received.setdefault(tenant, OrderedDict())
            entries.pop((response_id, index), None)
            entries[(response_id, index)] = Received(ids, num_prompt, model, seq)
            while len(entries) > self.size:
                entries.popitem(last=False)

    def get(self, tenant: str, response_id: str, index: int) -> Received | None:
        """Choice `index` of that response, or its first choice when it had fewer."""
        with self._lock:
            entries: dict[tuple[str, int], Received] = self._received.get(tenant) or {}
            return entries.get((response_id, index)) or entries.get((response_id, 0))

    def recent(self, tenant: str, before_seq: int, exclude: str, limit: int = RECENT_LIMIT) -> list[Received]:
        """The tenant's last `limit` sequences finished before `before_seq`, other than response
        `exclude`'s, newest first (a comparison costs microseconds per entry: bounded per request)."""
        with self._lock:
            entries: dict[tuple[str, int], Received] = self._received.get(tenant) or {}
            found = []
            for (rid, _), r in reversed(entries.items()):
                if r.seq <= before_seq and rid != exclude:
                    found.append(r)
                    if len(found) == limit:
                        break
            return found

    def remember_reply(self, tenant: str, key: str, ids: tuple[int, ...]) -> None:
        if self.size == 0:
            return
        with self._lock:
            replies = self._replies.setdefault(tenant, OrderedDict())
            replies.pop(key, None)
            replies[key] = ids
            while len(replies) > self.size:
                replies.popitem(last=False)

    def reply(self, tenant: str, key: str) -> tuple[int, ...] | None:
        with self._lock:
            replies = self._replies.get(tenant)
            if replies is None or key not in replies:
                return None
            replies.move_to_end(key)  # in use: kept longest
            return replies[key]
