"""The test session's live `radixgate serve` processes: one per distinct (flags, env), at most
`max_live` running at once. Asking for a fifth stops the least recently used; asking again for a
stopped or crashed one starts it afresh. Imports nothing heavy (the server runs in a child)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence

from radixgate.gateway.server_process import ServerProcess

Key = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]

# The keyless server most live tests share: the built-in model, the default KV pool, and the debug
# endpoints (`/debug/check_idle_invariant`) that tests check a server's bookkeeping with.
KEYLESS = ("--enable-debug-endpoints",)


def start_server(flags: list[str], env: dict[str, str]) -> ServerProcess:
    return ServerProcess(flags, env=env).start()


class LiveServers:
    """`servers.get(["--api-key", "k"])` -> a running `ServerProcess` shared by every caller that
    passes the same flags (in the same order) and the same extra environment."""

    def __init__(self, max_live: int = 4, start: Callable[[list[str], dict[str, str]], ServerProcess] = start_server):
        assert max_live >= 1
        self.max_live = max_live
        self.start = start  # the pool's own test starts plain child processes instead
        self.running: collections.OrderedDict[Key, ServerProcess] = collections.OrderedDict()  # oldest use first
        self.num_started = 0

    @staticmethod
    def key(flags: Sequence[str], env: Mapping[str, str] | None) -> Key:
        assert not isinstance(flags, str), "flags is a list of arguments, not one string"
        return tuple(str(flag) for flag in flags), tuple(sorted((env or {}).items()))

    def get(self, flags: Sequence[str] = (), *, env: Mapping[str, str] | None = None) -> ServerProcess:
        key = self.key(flags, env)
        server = self.running.get(key)
        if server is not None and (server.process is None or server.process.poll() is not None):
            del self.running[key]  # it died (or a test stopped it): start a new one
            server = None
        if server is not None:
            self.running.move_to_end(key)
            return server
        while len(self.running) >= self.max_live:
            _, oldest = self.running.popitem(last=False)
            oldest.stop()
        server = self.start(list(key[0]), dict(key[1]))
        self.num_started += 1
        self.running[key] = server
        return server

    def stop_all(self) -> None:
        while self.running:
            _, server = self.running.popitem()
            server.stop()
