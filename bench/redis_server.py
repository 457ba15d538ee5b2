"""A throwaway `redis-server` for benchmarks and tests of HiCache's remote tier: loopback only, a free
port, no persistence (`--save '' --appendonly no`), its files in a temporary folder; `stop` kills it
and `start` brings it back empty on the same port (a store restart)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time


def redis_server_path() -> str | None:
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, port: int | None = None, maxmemory_mb: int = 0):
        path = redis_server_path()
        if path is None:
            raise FileNotFoundError("redis-server is not installed: apt-get install redis-server (or make redis)")
        self.path = path
        self.port = port or free_port()
        self.maxmemory_mb = maxmemory_mb
        self.dir = tempfile.mkdtemp(prefix="radixgate-redis-")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        assert self.proc is None, "already running"
        args = [self.path, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", self.dir, "--daemonize", "no", "--loglevel", "warning"]
        if self.maxmemory_mb:
            args += ["--maxmemory", f"{self.maxmemory_mb}mb", "--maxmemory-policy", "allkeys-lru"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode} (port {self.port} taken?)")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def stop(self) -> None:
        """Kills the server (SIGKILL: a crash, nothing saved)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
