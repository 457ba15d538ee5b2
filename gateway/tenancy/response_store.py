"""The `/v1/responses` store: what `previous_response_id`, `GET` and `DELETE /v1/responses/{id}` read.

Each tenant has its own store, bounded by entries and by bytes (`--response-store-size`,
`--response-store-bytes`) and expiring (`--response-store-ttl`): when a put goes over a bound the
oldest entries go first, and an expired or dropped entry reads as unknown. One tenant's entries
never count against another's bounds, and a lookup only ever sees the caller's own tenant, so
another tenant's id answers exactly as an id that never existed.

An entry keeps what a continuation needs to reuse the previous request's tokens instead of
rendering them again: the prompt's token ids, the output's token ids, the chat messages and tools
they came from, and the response body `GET` returns.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TOKEN_BYTES = 4  # a token id as the store counts it (int32)


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]  # the body `GET /v1/responses/{id}` answers
    prompt_ids: list[int]
    output_ids: list[int]
    messages: list[dict[str, Any]]  # the chat messages of the prompt plus the answer, as the template sees them
    tools: list[dict[str, Any]] | None
    instructions: str | None
    num_bytes: int = field(default=0)

    @classmethod
    def of(cls, response: dict[str, Any], prompt_ids: list[int], output_ids: list[int], **rest: Any) -> StoredResponse:
        """Its size: the JSON of what it holds plus its token ids."""
        text = json.dumps([response, rest.get("messages"), rest.get("tools"), rest.get("instructions")])
        num_bytes = len(text.encode()) + TOKEN_BYTES * (len(prompt_ids) + len(output_ids))
        return cls(response, prompt_ids, output_ids, num_bytes=num_bytes, **rest)


class ResponseStore:
    """Thread-safe; `clock` is injectable (tests) and counts seconds."""

    def __init__(
        self, max_entries: int, max_bytes: int, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_entries < 0 or max_bytes < 0 or ttl_s <= 0:
            raise ValueError("the response store needs max_entries >= 0, max_bytes >= 0 and ttl_s > 0")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        # tenant -> id -> (expires_at, entry), oldest first
        self._tenants: dict[str, OrderedDict[str, tuple[float, StoredResponse]]] = {}
        self._bytes: dict[str, int] = {}

    def put(self, tenant: str, response_id: str, entry: StoredResponse) -> bool:
        """Keep `entry`, dropping the tenant's oldest entries to stay within the bounds. An entry larger
        than the byte bound on its own is not kept (False)."""
        if entry.num_bytes > self.max_bytes or self.max_entries == 0:
            return False
        with self._lock:
            entries = self._tenants.setdefault(tenant, OrderedDict())
            self._expire(tenant, entries)
            self._pop(tenant, entries, response_id)
            entries[response_id] = (self.clock() + self.ttl_s, entry)
            self._bytes[tenant] = self._bytes.get(tenant, 0) + entry.num_bytes
            while len(entries) > self.max_entries or self._bytes[tenant] > self.max_bytes:
                self._pop(tenant, entries, next(iter(entries)))
        return True

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        with self._lock:
            entries = self._tenants.get(tenant)
            if entries is None:
                return None
            self._expire(tenant, entries)
            found = entries.get(response_id)
            return found[1] if found is not None else None

    def delete(self, tenant: str, response_id: str) -> bool:
        with self._lock:
            entries = self._tenants.get(tenant)
            if entries is None:
                return False
            self._expire(tenant, entries)
            return self._pop(tenant, entries, response_id)

    def num_entries(self, tenant: str) -> int:
        with self._lock:
            entries = self._tenants.get(tenant)
            if entries is not None:
                self._expire(tenant, entries)
            return len(entries or ())

    def num_bytes(self, tenant: str) -> int:
        with self._lock:
            return self._bytes.get(tenant, 0)

    def _expire(self, tenant: str, entries: OrderedDict[str, tuple[float, StoredResponse]]) -> None:
        """Entries expire in insertion order (one ttl for all), so the expired ones are at the front."""
        now = self.clock()
        while entries:
            response_id, (expires_at, _) = next(iter(entries.items()))
            if expires_at > now:
                break
            self._pop(tenant, entries, response_id)

    def _pop(self, tenant: str, entries: OrderedDict[str, tuple[float, StoredResponse]], response_id: str) -> bool:
        found = entries.pop(response_id, None)
        if found is None:
            return False
        self._bytes[tenant] -= found[1].num_bytes
        return True
