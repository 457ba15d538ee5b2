"""The test session's live `radixgate serve` processes: one per distinct (flags, env), at most
`max_live` running at once. Asking for a fifth stops the least recently used; asking again for a
stopped or crashed one starts it afresh. `StopAfterLastUse` (a pytest plugin) also stops each server
after the last test that can use it. Imports nothing heavy (the server runs in a child)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence

import pytest

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
        self.acquirers: dict[Key, set[Hashable]] = {}  # who asked for each running server
        self.num_started = 0

    @staticmethod
    def key(flags: Sequence[str], env: Mapping[str, str] | None) -> Key:
        assert not isinstance(flags, str), "flags is a list of arguments, not one string"
        return tuple(str(flag) for flag in flags), tuple(sorted((env or {}).items()))

    def get(
        self, flags: Sequence[str] = (), *, env: Mapping[str, str] | None = None, acquirer: Hashable | None = None
    ) -> ServerProcess:
        """The running server for (flags, env), started if needed. `acquirer` (a fixture, or a test)
        is recorded for `stop_unused`; a server nobody named as acquirer only stops by LRU or at the end."""
        key = self.key(flags, env)
        server = self.running.get(key)
        if server is not None and (server.process is None or server.process.poll() is not None):
            del self.running[key]  # it died (or a test stopped it): start a new one for the same acquirers
            server = None
        if server is not None:
            self.running.move_to_end(key)
        else:
            while len(self.running) >= self.max_live:
                self._stop(next(iter(self.running)))
            server = self.start(list(key[0]), dict(key[1]))
            self.num_started += 1
            self.running[key] = server
        if acquirer is not None:
            self.acquirers.setdefault(key, set()).add(acquirer)
        return server

    def stop_unused(self, is_needed: Callable[[Hashable], bool]) -> list[Key]:
        """Stops each running server that has acquirers and none of them `is_needed`; their keys."""
        unused = [
            key for key in self.running if self.acquirers.get(key) and not any(map(is_needed, self.acquirers[key]))
        ]
        for key in unused:
            self._stop(key)
        return unused

    def _forget(self, key: Key) -> ServerProcess:
        self.acquirers.pop(key, None)
        return self.running.pop(key)

    def _stop(self, key: Key) -> None:
        self._forget(key).stop()

    def stop_all(self) -> None:
        while self.running:
            self._stop(next(reversed(self.running)))


class StopAfterLastUse:
    """A pytest plugin: stops each pooled server after the last test, in the session's final order
    (after pytest-randomly's shuffle), that can still use a fixture that asked for it.

    A server's acquirers are the fixtures being set up when `live_server` was called (the innermost
    one), or the test itself when its body called it. A test can use a fixture when the fixture is
    in its closure (`item._fixtureinfo`), or, since `request.getfixturevalue` asks by name at run
    time, when the test has `request` and the fixture is visible from it (defined at or above it).
    Which flags a fixture asks for is known only once it runs, so nothing stops while a later test
    can still ask for flags not yet seen: one calling `live_server` in its body, or one using a
    fixture that takes `live_server` and has not run yet (a fixture that ran, even per test, is taken
    to ask for the same flags again). A server stopped too early would only be started again; one
    still in a fixture's hands is never stopped.
    """

    def __init__(self) -> None:
        self.pool: LiveServers | None = None
        self._index: dict[str, int] = {}
        self._users: dict[Hashable, int] = {}  # acquirer -> index of the last item that can use it
        self._items: list[pytest.Item] = []
        self._askers: list[tuple[int, bool, frozenset[pytest.FixtureDef]]] = []  # (index, direct, fixtures)
        self._set_up: set[pytest.FixtureDef] = set()
        self._setting_up: list[pytest.FixtureDef] = []  # fixtures being set up, innermost last
        self._current: pytest.Item | None = None

    def acquirer(self) -> Hashable | None:
        if self._setting_up:
            return self._setting_up[-1]
        return ("test", self._current.nodeid) if self._current is not None else None

    @pytest.hookimpl(trylast=True)  # after every reordering (pytest-randomly's runs before the yield of its wrapper)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self._items = list(items)
        self._index = {item.nodeid: i for i, item in enumerate(items)}
        self._users.clear()
        takers = {d for item in items for d in _fixtures(item) if "live_server" in d.argnames}
        self._askers = []
        for i, item in enumerate(items):
            fixtures = {d for d in takers if _can_use(item, d)}
            direct = "live_server" in getattr(getattr(item, "_fixtureinfo", None), "argnames", ())
            if fixtures or direct:
                self._askers.append((i, direct, frozenset(fixtures)))

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef) -> Iterator[None]:
        self._setting_up.append(fixturedef)
        try:
            return (yield)
        finally:
            self._setting_up.pop()
            self._set_up.add(fixturedef)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self._current = item
        try:
            return (yield)
        finally:
            self._current = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        try:
            return (yield)
        finally:  # after the item's own and its fixtures' finalizers: nothing of it needs a server now
            index = self._index.get(item.nodeid)
            if self.pool is not None and index is not None and not self.may_ask_later(index):
                self.pool.stop_unused(lambda acquirer: self.last_use(acquirer) > index)

    def may_ask_later(self, index: int) -> bool:
        """Whether an item after `index` may still call `live_server` with flags not yet seen."""
        return any(i > index and (direct or not fixtures <= self._set_up) for i, direct, fixtures in self._askers)

    def last_use(self, acquirer: Hashable) -> int:
        """The index of the last item that can use `acquirer` (-1: none)."""
        if acquirer not in self._users:
            if isinstance(acquirer, tuple):  # ("test", nodeid)
                self._users[acquirer] = self._index.get(acquirer[1], -1)
            else:
                users = [i for i, item in enumerate(self._items) if _can_use(item, acquirer)]
                self._users[acquirer] = max(users, default=-1)
        return self._users[acquirer]


def _fixtures(item: pytest.Item) -> set[pytest.FixtureDef]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {d for name in info.names_closure for d in info.name2fixturedefs.get(name, ())}


def _can_use(item: pytest.Item, fixturedef: pytest.FixtureDef) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    if any(fixturedef in info.name2fixturedefs.get(name, ()) for name in info.names_closure):
        return True
    return "request" in info.names_closure and fixturedef.baseid in {node.nodeid for node in item.listchain()}
