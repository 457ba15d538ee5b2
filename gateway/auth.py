"""API keys and tenants. Each key maps to a tenant; the tenant, never the client, salts the cache."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from .config import DEFAULT_TENANT
from .errors import APIError


def load_api_keys_file(path: str | Path) -> dict[str, str]:
    """Read `key -> tenant` from a JSON object, or from lines of `KEY TENANT` (`#` starts a comment)."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        data = json.loads(text)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            raise ValueError(f"{path}: the JSON object must map key strings to tenant strings")
        return dict(data)
    keys: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"{path}:{number}: expected 'KEY TENANT', got {len(fields)} fields")
        keys[fields[0]] = fields[1]
    return keys


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class Authenticator:
    """Turns an `Authorization` header into a tenant name, or raises a 401 `APIError`."""

    def __init__(self, api_keys: Mapping[str, str]) -> None:
        # Keys are held as digests so a lookup's timing says nothing about the key's characters.
        self._tenants = {_digest(key): tenant for key, tenant in api_keys.items()}

    @property
    def enabled(self) -> bool:
        return bool(self._tenants)

    def tenant_for(self, authorization: str | None) -> str:
        if not self._tenants:
            return DEFAULT_TENANT
        if not authorization:
            raise APIError(
                401,
                "missing API key: send 'Authorization: Bearer YOUR_KEY'",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )
        scheme, _, key = authorization.partition(" ")
        tenant = self._tenants.get(_digest(key.strip())) if scheme.lower() == "bearer" else None
        if tenant is None:
            raise APIError(
                401, "incorrect API key provided", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
            )
        return tenant


def cache_salt_for(tenant: str, auth_enabled: bool) -> str | None:
    """Without keys there is one tenant and no salt, so the cache is shared as in SGLang."""
    return f"tenant:{tenant}" if auth_enabled else None
