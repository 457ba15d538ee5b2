"""Per-tenant request and token rate limits as token buckets, refilled continuously."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from ..api.errors import APIError


class Bucket:
    """Holds up to `per_minute` units, refills at `per_minute / 60` per second, may go into debt.

    Debt lets a request charge its real token count after it finishes; the tenant then waits
    until the bucket is positive again.
    """

    def __init__(self, per_minute: int, clock: Callable[[], float]) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.level = float(per_minute)
        self._clock = clock
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now

    def seconds_until(self, amount: float) -> float:
        """0 if `amount` units are available now, else how long until they are."""
        self._refill()
        missing = min(amount, self.capacity) - self.level
        return 0.0 if missing <= 0 else missing / self.rate

    def charge(self, amount: float) -> None:
        self._refill()
        self.level -= amount


class RateLimiter:
    """`check_and_charge` admits a request or raises 429 with `Retry-After`; `charge_tokens` bills tokens."""

    def __init__(
        self,
        requests_per_minute: int | None,
        tokens_per_minute: int | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        self._clock = clock
        self._requests: dict[str, Bucket] = {}
        self._tokens: dict[str, Bucket] = {}
        self._lock = threading.Lock()

    def _bucket(self, table: dict[str, Bucket], tenant: str, limit: int) -> Bucket:
        if tenant not in table:
            table[tenant] = Bucket(limit, self._clock)
        return table[tenant]

    def check_and_charge(self, tenant: str, prompt_tokens: int) -> None:
        with self._lock:
            waits = []
            if self.rpm is not None:
                waits.append(("requests", self._bucket(self._requests, tenant, self.rpm).seconds_until(1)))
            if self.tpm is not None:
                # Admit while the bucket is positive; the prompt and output are billed in full.
                waits.append(("tokens", self._bucket(self._tokens, tenant, self.tpm).seconds_until(1)))
            blocked = [(kind, wait) for kind, wait in waits if wait > 0]
            if blocked:
                kind, wait = max(blocked, key=lambda kw: kw[1])
                limit = self.rpm if kind == "requests" else self.tpm
                raise APIError(
                    429,
                    f"rate limit reached for {kind} per minute (limit {limit}); retry after {math.ceil(wait)} s",
                    code=f"rate_limit_{kind}",
                    headers={"Retry-After": str(max(1, math.ceil(wait)))},
                )
            if self.rpm is not None:
                self._requests[tenant].charge(1)
            if self.tpm is not None:
                self._tokens[tenant].charge(prompt_tokens)

    def charge_tokens(self, tenant: str, tokens: int) -> None:
        if self.tpm is None or tokens <= 0:
            return
        with self._lock:
            self._bucket(self._tokens, tenant, self.tpm).charge(tokens)
