"""`sglang-router` (0.3.2, the dev extra) as a subprocess on a free 127.0.0.1 port in front of
radixgate workers, for the router bench's side-by-side runs (`router_peer.py`): started with the
`cache_aware` policy and its Prometheus endpoint on loopback too, ready once it reports every
worker healthy, and terminated when the `with` block ends."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence

import httpx

from radixgate.gateway.server_process import terminate

from .redis_server import free_port


class SglRouter:
    """`sglang-router` 0.3.2 as a subprocess on a free 127.0.0.1 port, in front of `urls`."""

    def __init__(self, urls: Sequence[str], log_path: str) -> None:
        self.urls, self.log_path = list(urls), log_path
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SglRouter:
        command = [
            sys.executable,
            "-m",
            "sglang_router.launch_router",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--policy",
            "cache_aware",
            "--log-level",
            "warn",
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(free_port()),
            "--worker-urls",
            *self.urls,
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                workers = httpx.get(f"{self.base_url}/workers", timeout=2).json().get("workers", [])
                if len([w for w in workers if w.get("is_healthy")]) == len(self.urls):
                    return self
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(
            f"sglang-router did not come up with {len(self.urls)} healthy workers (log: {self.log_path})"
        )

    def __exit__(self, *exc: object) -> None:
        process, self.process = self.process, None
        if process is not None:
            terminate(process)
