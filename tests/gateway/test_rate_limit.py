"""Token buckets with a fake clock."""

from __future__ import annotations

import pytest

from radixgate.gateway.api.errors import APIError
from radixgate.gateway.tenancy.rate_limit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_requests_refill_continuously() -> None:
    clock = Clock()
    limiter = RateLimiter(60, None, clock=clock)
    for _ in range(60):
        limiter.check_and_charge("t", 0)
    with pytest.raises(APIError) as info:
        limiter.check_and_charge("t", 0)
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "1"
    clock.now += 1.0  # 60/min refills one per second
    limiter.check_and_charge("t", 0)


def test_token_debt_delays_the_next_request() -> None:
    clock = Clock()
    limiter = RateLimiter(None, 600, clock=clock)  # 10 tokens per second
    limiter.check_and_charge("t", 500)
    limiter.charge_tokens("t", 300)  # 200 in debt
    with pytest.raises(APIError) as info:
        limiter.check_and_charge("t", 1)
    assert info.value.headers["Retry-After"] == "21"  # (200 + 1) / 10 per second
    clock.now += 21
    limiter.check_and_charge("t", 1)


def test_tenants_have_separate_buckets() -> None:
    limiter = RateLimiter(1, None, clock=Clock())
    limiter.check_and_charge("a", 0)
    limiter.check_and_charge("b", 0)
    with pytest.raises(APIError):
        limiter.check_and_charge("a", 0)


def test_no_limits_admit_everything() -> None:
    limiter = RateLimiter(None, None)
    for _ in range(1000):
        limiter.check_and_charge("t", 10**6)
