"""Run `radixgate serve` as a child process on loopback, for tools, benchmarks and end-to-end tests.

The server binds port 0 itself and prints the URL it got; the parent reads that line, so no other
process can take the port between choosing and binding it. The child runs in its own process, so
the parent never imports torch, and it is always terminated when the ``with`` block ends.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from types import TracebackType

import httpx

__all__ = ["ServerProcess", "URL_PREFIX"]

URL_PREFIX = "radixgate serving on "  # the first line `radixgate serve` prints once it listens
_KEPT_LINES = 5000


def terminate(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 15 s; nothing when it has already exited."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


class ServerProcess:
    """``with ServerProcess(["--api-key", "k"]) as server: server.base_url`` (``http://127.0.0.1:PORT``).

    `args` are `radixgate serve` flags; `api_url` is the OpenAI root (``base_url + "/v1"``) to give
    clients. `start()` and `stop()` do the same as the ``with`` block for callers that need them apart.
    """

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        startup_timeout_s: float = 180.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.args = list(args)
        self.startup_timeout_s = startup_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.base_url = ""
        self.output: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)  # the server's recent lines

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "radixgate.gateway.cli", "--host", "127.0.0.1", "--port", "0", *self.args]

    @property
    def api_url(self) -> str:
        """The OpenAI ``/v1`` root to give clients."""
        return self.base_url + "/v1"

    def log_tail(self, num_lines: int = 40) -> str:
        """The server's last lines of combined stdout and stderr."""
        return "".join(list(self.output)[-num_lines:])

    def start(self) -> ServerProcess:
        self.process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=self.env,
        )
        found = threading.Event()
        process = self.process

        def read() -> None:  # keeps draining, so the child never blocks on a full pipe
            assert process.stdout is not None
            for line in process.stdout:
                self.output.append(line)
                if not found.is_set() and line.startswith(URL_PREFIX):
                    self.base_url = line[len(URL_PREFIX) :].strip()
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not found.wait(0.1):
            if process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"`radixgate serve {' '.join(self.args)}` did not start:\n{self.log_tail()}")
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"radixgate serve printed its URL but /health never answered:\n{self.log_tail()}")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 15 s); safe to call twice."""
        process, self.process = self.process, None
        if process is not None:
            terminate(process)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
