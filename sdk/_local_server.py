"""Start `radixgate serve` as a child process on a free local port, for benchmarks and tests.

The server runs in its own process, so the SDK process never imports torch. `LocalServer` is a
context manager: it waits for ``GET /health`` and always terminates the child on exit.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import httpx

__all__ = ["LocalServer", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalServer:
    """``radixgate serve --port P [--disable-radix-cache] [extra_args]`` for the life of a ``with`` block."""

    def __init__(
        self, *, disable_radix_cache: bool = False, extra_args: Sequence[str] = (), startup_timeout: float = 180.0
    ) -> None:
        self.port = free_port()
        self.args = [sys.executable, "-m", "radixgate._cli", "serve", "--port", str(self.port), *extra_args]
        if disable_radix_cache:
            self.args.append("--disable-radix-cache")
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="radixgate-serve-", suffix=".log", delete=False)

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI ``/v1`` root to give clients."""
        return self.root_url + "/v1"

    def log_tail(self, num_chars: int = 3000) -> str:
        """The end of the server's combined stdout and stderr."""
        with open(self._log.name, "rb") as f:
            return f.read()[-num_chars:].decode("utf-8", "replace")

    def start(self) -> LocalServer:
        self._process = subprocess.Popen(
            self.args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"`{' '.join(self.args[1:])}` exited with {self._process.returncode}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(self.root_url + "/health", timeout=2.0).is_success:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise TimeoutError(
            f"`{' '.join(self.args[1:])}` did not answer /health within {self.startup_timeout:.0f} s:\n"
            f"{self.log_tail()}"
        )

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 15 s); safe to call twice."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=15)
        self._process = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._log.close()
        if not exc[0]:
            os.unlink(self._log.name)
