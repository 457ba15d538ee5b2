"""`radixgate serve`'s retention and priority flags (engine fields of the same names): request
priority, TTL pins' budget, and each tenant's fair share of the cache."""

from __future__ import annotations

import argparse

RETENTION_FLAGS = (
    "enable_priority_scheduling",
    "schedule_low_priority_values_first",
    "priority_aging_steps",
    "max_pinned_ratio",
    "tenant_cache_fairness",
    "tenant_active_window_s",
)


def add_retention_flags(e: argparse._ArgumentGroup) -> None:
    e.add_argument(
        "--enable-priority-scheduling",
        action="store_true",
        default=None,
        help="order waiting requests by their `priority` field (higher first), with aging; off: a non-zero "
        "priority is a 400",
    )
    e.add_argument(
        "--schedule-low-priority-values-first",
        action="store_true",
        default=None,
        help="with priority scheduling: lower values first (vLLM's order) instead of higher (SGLang's)",
    )
    e.add_argument(
        "--priority-aging-steps",
        type=int,
        default=None,
        help="a waiting request gains one priority level per this many scheduler steps, so none starves (default 32)",
    )
    e.add_argument(
        "--max-pinned-ratio",
        type=float,
        default=None,
        help="TTL pins (cache_control ttl, prompt_cache_options.ttl, cache_ttl) hold at most this fraction of "
        "the KV pool; past it the oldest pin is released (copied to host/disk first with HiCache); 0: no pins "
        "(default 0.25)",
    )
    fairness = e.add_mutually_exclusive_group()
    fairness.add_argument(
        "--disable-tenant-cache-fairness",
        dest="tenant_cache_fairness",
        action="store_false",
        default=None,
        help="evict in the policy's order alone, whoever's prefixes they are; by default (fair share on) eviction "
        "takes first from tenants above their fair share of the cache (weights: `weight` in the keys file)",
    )
    fairness.add_argument(
        "--tenant-cache-fairness",
        action="store_true",
        default=None,
        help="fair share on (the default; kept so that scripts naming it still start)",
    )
    e.add_argument(
        "--tenant-active-window",
        dest="tenant_active_window_s",
        type=float,
        default=None,
        help="a tenant counts toward fair shares while it sent a request within this many seconds (default 60)",
    )


def tenant_weights(keys_file: str | None) -> dict[str, float]:
    """Each tenant's weight in the cache's fair shares, from the keys file (`weight`; 1 if absent)."""
    from .tenancy.auth import read_keys_file

    if not keys_file:
        return {}
    return {e.tenant: e.weight for e in read_keys_file(keys_file) if e.weight != 1.0}
