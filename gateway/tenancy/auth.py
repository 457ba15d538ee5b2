"""API keys, tenants and roles. Each key maps to a tenant; the tenant, never the client, salts the cache.

Roles: a `tenant` key reaches its own tenant's data only; an `admin` key also reaches the control
plane (`/workers`, `/dashboard/data`, `/metrics`, a whole-cache `/flush_cache`). The `worker` role is
the channel from a front gateway to this server (`--worker-api-key`): only on it may a request name
the tenant and cache salt it runs under, and the tenant's weight in the cache's fair shares (the
front gateway decided them from its own keys; `WEIGHT_HEADER`).

An admin key without a tenant of its own runs under the tenant `admin`, so that name is reserved:
a keys file that gives it to a tenant is refused at load (the tenant would share the admin keys'
cache namespace). `Authenticator.reload` swaps every key at once (`radixgate serve` on SIGHUP).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..api.errors import APIError
from ..config import DEFAULT_TENANT

ROLES = ("tenant", "admin")
WORKER_ROLE = "worker"
ADMIN_TENANT = "admin"  # the namespace of admin keys that have no tenant
RESERVED_TENANTS = frozenset({ADMIN_TENANT})
SALT_HEADER = "x-radixgate-cache-salt"
TENANT_HEADER = "x-radixgate-tenant"
WEIGHT_HEADER = "x-radixgate-tenant-weight"  # the tenant's keys-file weight, on the worker channel only


@dataclass(frozen=True)
class KeyEntry:
    key: str
    tenant: str
    role: str = "tenant"
    weight: float = 1.0  # the tenant's weight in cache fair shares (engine/kvcache/tenant_share.py)


def read_keys_file(path: str | Path) -> list[KeyEntry]:
    """A JSON object (`{"KEY": "TENANT"}` or `{"KEY": {"tenant": ..., "role": "admin", "weight": 2}}`),
    or lines of `KEY TENANT [ROLE [WEIGHT]]` (`#` starts a comment); ROLE is `tenant` (the default) or
    `admin`; WEIGHT (default 1) is the tenant's weight in the cache's fair shares."""
    text = Path(path).read_text(encoding="utf-8")
    entries: list[KeyEntry] = []
    if text.lstrip().startswith("{"):
        for key, value in json.loads(text).items():
            if isinstance(value, str):
                entries.append(KeyEntry(key, value))
            elif isinstance(value, dict) and isinstance(value.get("tenant"), str):
                role, weight = str(value.get("role", "tenant")), value.get("weight", 1.0)
                entries.append(KeyEntry(key, value["tenant"], role, _weight(weight, path)))
            else:
                raise ValueError(f"{path}: each key maps to a tenant string or to {{'tenant': ..., 'role': ...}}")
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            if len(fields) not in (2, 3, 4):
                raise ValueError(f"{path}:{number}: expected 'KEY TENANT [ROLE [WEIGHT]]', got {len(fields)} fields")
            weight = _weight(fields[3], f"{path}:{number}") if len(fields) == 4 else 1.0
            role = fields[2] if len(fields) > 2 else "tenant"
            entries.append(KeyEntry(fields[0], fields[1], role, weight))
    for entry in entries:
        if entry.role not in ROLES:
            raise ValueError(f"{path}: key for tenant '{entry.tenant}' has role '{entry.role}'; use one of {ROLES}")
        check_tenant_name(entry.tenant, f"{path}: ")
    return entries


def _weight(value: object, where: object) -> float:
    try:
        weight = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        weight = -1.0
    if not 0 < weight < float("inf"):
        raise ValueError(f"{where}: a tenant's weight must be a number > 0, got {value!r}")
    return weight


def check_tenant_name(tenant: str, where: str = "") -> None:
    if tenant in RESERVED_TENANTS:
        raise ValueError(
            f"{where}the tenant name '{tenant}' is reserved (admin keys without a tenant use its cache namespace); "
            "give that tenant another name"
        )


def load_api_keys_file(path: str | Path) -> dict[str, str]:
    """Read `key -> tenant` from a keys file (roles ignored)."""
    return {e.key: e.tenant for e in read_keys_file(path)}


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class Tenant(str):
    """A tenant name that carries the cache salt, and the weight, its channel decided."""

    cache_salt: str | None
    weight: float | None  # None: the channel named none (this server's keys file decides)

    def __new__(cls, name: str, cache_salt: str | None, weight: float | None = None) -> Tenant:
        tenant = super().__new__(cls, name)
        tenant.cache_salt = cache_salt
        tenant.weight = weight
        return tenant


def channel_weight(value: str | None) -> float | None:
    """The `WEIGHT_HEADER` a front gateway sent (None if it sent none); a bad one is a 400."""
    if value is None:
        return None
    try:
        return _weight(value, WEIGHT_HEADER)
    except ValueError as error:
        raise APIError(400, str(error), param=WEIGHT_HEADER) from error


def tenant_weight(tenant: str, weights: Mapping[str, float]) -> float:
    """The tenant's weight in the cache's fair shares: what the worker channel carried, else this
    server's keys file (`weights`), else 1."""
    if isinstance(tenant, Tenant) and tenant.weight is not None:
        return tenant.weight
    return weights.get(tenant, 1.0)


@dataclass(frozen=True)
class Identity:
    tenant: str
    role: str  # "tenant" | "admin" | "worker"

    @property
    def is_admin(self) -> bool:
        return self.role in ("admin", WORKER_ROLE)


class Authenticator:
    """Turns an `Authorization` header into an `Identity`, or raises a 401 `APIError`."""

    def __init__(
        self, api_keys: Mapping[str, str], admin_keys: Collection[str] = (), worker_key: str | None = None
    ) -> None:
        self._worker = _digest(worker_key) if worker_key else None
        self.reload(api_keys, admin_keys)

    def reload(self, api_keys: Mapping[str, str], admin_keys: Collection[str] = ()) -> None:
        """Replace the tenant and admin keys (the worker key stays): requests in flight keep the
        identity they had; the next one is checked against the new keys. Raises ValueError for a
        reserved tenant name, leaving the old keys in place."""
        for tenant in set(api_keys.values()):
            check_tenant_name(tenant)
        if getattr(self, "_tenants", None) and not (api_keys or admin_keys):
            raise ValueError("the new keys file has no keys; refusing to open the server to everyone")
        # Keys are held as digests so a lookup's timing says nothing about the key's characters.
        tenants = {_digest(key): tenant for key, tenant in api_keys.items()}
        admins = {_digest(key) for key in admin_keys}
        self._tenants, self._admins = tenants, admins  # two assignments, no await between them

    @property
    def enabled(self) -> bool:
        return bool(self._tenants or self._admins or self._worker)

    def identify(self, authorization: str | None) -> Identity:
        if not self.enabled:
            return Identity(DEFAULT_TENANT, "admin")
        if not authorization:
            raise APIError(
                401,
                "missing API key: send 'Authorization: Bearer YOUR_KEY'",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )
        scheme, _, key = authorization.partition(" ")
        digest = _digest(key.strip()) if scheme.lower() == "bearer" else b""
        if digest and digest == self._worker:
            return Identity(DEFAULT_TENANT, WORKER_ROLE)
        tenant = self._tenants.get(digest)
        if tenant is not None:
            return Identity(tenant, "admin" if digest in self._admins else "tenant")
        if digest in self._admins:
            return Identity(ADMIN_TENANT, "admin")
        raise APIError(
            401, "incorrect API key provided", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
        )

    def tenant_for(self, authorization: str | None) -> str:
        return self.identify(authorization).tenant


def cache_salt_for(tenant: str, auth_enabled: bool) -> str | None:
    """Without keys there is one tenant and no salt, so the cache is shared as in SGLang. A tenant
    that came over the worker channel carries the salt the front gateway chose."""
    if isinstance(tenant, Tenant):
        return tenant.cache_salt
    return f"tenant:{tenant}" if auth_enabled else None
