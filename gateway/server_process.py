"""Run `radixgate serve` as a child process on a free loopback port (for tools and end-to-end tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from types import TracebackType

import httpx

URL_PREFIX = "radixgate serving on "


class ServerProcess:
    """`with ServerProcess(["--api-key", "k"]) as server: server.base_url` — always terminated on exit."""

    def __init__(
        self, args: list[str] | None = None, startup_timeout_s: float = 120.0, env: dict[str, str] | None = None
    ) -> None:
        self.args = list(args or [])
        self.startup_timeout_s = startup_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.base_url = ""
        self.output: list[str] = []

    def __enter__(self) -> ServerProcess:
        cmd = [sys.executable, "-m", "radixgate.gateway.cli", "--host", "127.0.0.1", "--port", "0", *self.args]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env)
        found = threading.Event()

        def read() -> None:  # keeps draining, so the child never blocks on a full pipe
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                if line.startswith(URL_PREFIX):
                    self.base_url = line[len(URL_PREFIX) :].strip()
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not found.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("radixgate serve did not start:\n" + "".join(self.output[-40:]))
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        self.__exit__(None, None, None)
        raise RuntimeError("radixgate serve printed its URL but /health never answered")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
