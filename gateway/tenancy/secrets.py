"""Where a server's keys come from: the keys file (roles and tenants), one-key secret files, the
environment — never argv for a secret, which `ps` shows — and a reload of all of them on SIGHUP."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path

from .auth import Authenticator, read_keys_file


def _secret_lines(path: str) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in Path(path).read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


def load_keys(args: argparse.Namespace) -> tuple[dict[str, str], frozenset[str]]:
    """Tenant keys (`key -> tenant`) and admin keys from the files, the environment and the flags."""
    keys: dict[str, str] = {}
    admins = set(args.admin_api_key)
    if args.api_keys_file:
        for entry in read_keys_file(args.api_keys_file):
            keys[entry.key] = entry.tenant
            if entry.role == "admin":
                admins.add(entry.key)
    if args.admin_api_key_file:
        admins.update(_secret_lines(args.admin_api_key_file))
    if os.environ.get("RADIXGATE_ADMIN_API_KEY"):
        admins.add(os.environ["RADIXGATE_ADMIN_API_KEY"])
    tenant_key = args.api_key or os.environ.get("RADIXGATE_API_KEY")
    if tenant_key:
        keys[tenant_key] = "default"
    return keys, frozenset(admins)


def worker_key(args: argparse.Namespace) -> str | None:
    if args.worker_api_key_file:
        lines = _secret_lines(args.worker_api_key_file)
        if len(lines) != 1:
            raise ValueError(f"{args.worker_api_key_file}: expected one worker key, found {len(lines)} lines")
        return lines[0]
    return args.worker_api_key or os.environ.get("RADIXGATE_WORKER_API_KEY") or None


def reload_keys(args: argparse.Namespace, auth: Authenticator) -> None:
    """SIGHUP: the keys files (and environment) again; a file that fails to load keeps the old keys."""
    try:
        auth.reload(*load_keys(args))
    except (ValueError, OSError) as exc:
        logging.getLogger("radixgate.gateway").error("SIGHUP: keys not reloaded, the old ones stay: %s", exc)
        return
    logging.getLogger("radixgate.gateway").warning("SIGHUP: API keys reloaded")


def install_key_reload(args: argparse.Namespace, auth: Authenticator) -> None:
    """SIGHUP re-reads the keys (its default would end the server; uvicorn handles INT and TERM only)."""
    signal.signal(signal.SIGHUP, lambda *_: reload_keys(args, auth))
