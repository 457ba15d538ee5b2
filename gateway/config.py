"""The gateway's configuration: one frozen dataclass, built by `radixgate serve` or by tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from radixgate.engine.config import EngineConfig

DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class GatewayConfig:
    """Everything the HTTP layer needs; the engine has its own `EngineConfig`.

    `api_keys` maps each accepted bearer key to its tenant. Empty means the server is open
    (meant for loopback) and every request belongs to tenant `"default"`.
    Rate limits are per tenant and per minute; `None` disables a limit.
    """

    host: str = "127.0.0.1"
    port: int = 30000
    api_keys: Mapping[str, str] = field(default_factory=dict)
    rate_limit_rpm: int | None = None
    rate_limit_tpm: int | None = None
    max_queued_requests: int | None = None
    max_request_bytes: int = 8 * 1024 * 1024
    log_requests: bool = False
    served_model_name: str | None = None
    max_template_labels: int = 20
    max_tracked_templates: int = 1000
    disable_prompt_excerpts: bool = False  # drift in /v1/prompt_stats without any prompt text
    dashboard_window_s: int = 300
    enable_debug_endpoints: bool = False
    engine: EngineConfig | None = None  # used only when create_app builds the worker
    # Keys with the admin role (also in `api_keys` when they have a tenant); see auth.py.
    admin_api_keys: frozenset[str] = frozenset()
    public_metrics: bool = False  # /metrics without a key even when keys are configured
    # The channel from a front gateway to this server, or from this gateway to its workers.
    worker_api_key: str | None = None
    # Routing: remote workers (URLs; `openai+http://`, `vllm+http://` for foreign servers) and/or
    # `dp_size` co-located engines. No workers and dp_size 1 is the single co-located engine.
    workers: tuple[str, ...] = ()
    dp_size: int = 1
    router_policy: str | None = None  # default: cache_aware
    allow_unsalted_workers: bool = False
    health_check_interval_s: float = 1.0
    # `--disaggregation-mode prefill|decode` (workers/pd_worker.py's DisaggConfig); None: co-located
    disaggregation: Any = None
    # `--prefill URL [PORT] --decode URL`: radixgate's PD router ((prefills, decodes), pd_router.py)
    pd_workers: Any = None
    # tool-call output format (tool_parsers.py); None: chosen from the model's chat template
    tool_call_parser: str | None = None
    # Bounded work (structured_output.py): how long a client waits for its grammar, and how many
    # compiles one tenant may have queued or running at once.
    grammar_compile_timeout_s: float = 10.0
    max_grammar_compiles_per_tenant: int = 2
    # `POST /workers` adds only workers on these hosts / CIDRs (routes_admin.py); default: loopback.
    worker_allowlist: tuple[str, ...] = ("127.0.0.0/8", "::1", "localhost")
    # Without keys: the `Host` names answered, and no cross-site state changes (middleware.py).
    # Empty: no such check (an app embedded in-process); `radixgate serve` sets loopback names.
    allowed_hosts: tuple[str, ...] = ()
    # `/v1/responses`' store (tenancy/response_store.py): per tenant, at most this many responses and
    # bytes, each kept this many seconds.
    response_store_size: int = 1000
    response_store_bytes: int = 64 * 1024 * 1024
    response_store_ttl_s: float = 3600.0
    # Each tenant's weight in the cache's fair shares (the keys file's `weight`; default 1).
    tenant_weights: Mapping[str, float] = field(default_factory=dict)
    # cache_diagnostics and history keeping (gateway/diagnostics/): recent prompts and generated
    # replies kept per tenant; history_keeping splices generated replies' ids into later chat prompts.
    diagnostics_history_size: int = 256
    history_keeping: bool = True

    def __post_init__(self) -> None:
        for name in ("rate_limit_rpm", "rate_limit_tpm", "max_queued_requests"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 (or unset to disable it), got {value}")
        if self.max_request_bytes < 1024:
            raise ValueError(f"max_request_bytes must be >= 1024, got {self.max_request_bytes}")
        if self.max_template_labels < 1:
            raise ValueError(f"max_template_labels must be >= 1, got {self.max_template_labels}")
        if self.disaggregation is not None and self.disaggregation.is_enabled:
            if self.is_routed:
                raise ValueError("--disaggregation-mode serves one co-located engine: drop --worker / --dp-size")
        if self.dp_size < 1:
            raise ValueError(f"dp_size must be >= 1, got {self.dp_size}")
        if self.grammar_compile_timeout_s <= 0 or self.max_grammar_compiles_per_tenant < 1:
            raise ValueError("grammar_compile_timeout_s must be > 0 and max_grammar_compiles_per_tenant >= 1")
        if self.response_store_size < 0 or self.response_store_bytes < 0 or self.response_store_ttl_s <= 0:
            raise ValueError("response_store_size and response_store_bytes must be >= 0, response_store_ttl_s > 0")
        if self.diagnostics_history_size < 0:
            raise ValueError(f"diagnostics_history_size must be >= 0, got {self.diagnostics_history_size}")
        if self.health_check_interval_s <= 0:
            raise ValueError(f"health_check_interval_s must be > 0, got {self.health_check_interval_s}")
        if self.tool_call_parser is not None:
            from .features.tool_parsers import get_parser

            get_parser(self.tool_call_parser)  # an unknown name fails at startup, listing the known ones
        for key, tenant in self.api_keys.items():
            if not key or not tenant:
                raise ValueError("every API key needs a non-empty key and tenant name")

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys or self.admin_api_keys)

    @property
    def is_routed(self) -> bool:
        """A router in front of remote workers or several co-located engines."""
        return bool(self.workers) or self.dp_size > 1 or self.pd_workers is not None
