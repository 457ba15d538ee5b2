"""The session's live-server pool (tests/live_servers.py): one server per (flags, env), the least
recently used stopped when one more than the cap is needed, a dead one restarted, all stopped at the
end. Real child processes stand in for `radixgate serve`, so the bookkeeping is tested in a second."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from live_servers import LiveServers

from radixgate.gateway.server_process import ServerProcess


class SleepingChild(ServerProcess):
    """A real process that only waits; `stop()` is ServerProcess's own."""

    def start(self) -> ServerProcess:
        self.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], text=True)
        self.base_url = f"http://127.0.0.1:{self.process.pid}"  # unique per child, for the asserts
        return self


def _start(flags: list[str], env: dict[str, str]) -> ServerProcess:
    return SleepingChild(flags, env=env).start()


def test_one_server_per_flag_set_and_env() -> None:
    servers = LiveServers(4, start=_start)
    try:
        a = servers.get(["--x"])
        assert servers.get(["--x"]) is a and servers.get(("--x",)) is a
        assert servers.get(["--y"]) is not a
        assert servers.get(["--x"], env={"A": "1"}) is not a
        assert servers.get(["--x"], env={"A": "1"}) is servers.get(["--x"], env={"A": "1"})
        assert servers.num_started == 3
    finally:
        servers.stop_all()


def test_the_least_recently_used_stops_when_one_more_is_needed() -> None:
    servers = LiveServers(2, start=_start)
    try:
        a, b = servers.get(["a"]), servers.get(["b"])
        assert servers.get(["a"]) is a  # a is now the most recent: b goes first
        a_process, b_process = a.process, b.process
        c = servers.get(["c"])
        assert b.process is None and b_process is not None and b_process.poll() is not None
        assert a_process is not None and a_process.poll() is None and c.process is not None
        assert list(servers.running) == [(("a",), ()), (("c",), ())]
        again = servers.get(["b"])  # b starts afresh, a (now the oldest) stops
        assert again is not b and again.process is not None and a.process is None
        assert servers.num_started == 4
    finally:
        servers.stop_all()


def test_a_dead_server_is_started_again_and_all_stop_at_the_end() -> None:
    servers = LiveServers(4, start=_start)
    a = servers.get([])
    assert a.process is not None
    a.process.kill()
    a.process.wait(timeout=10)
    b = servers.get([])
    assert b is not a and b.process is not None and b.process.poll() is None
    processes = [b.process, servers.get(["--other"]).process]
    servers.stop_all()
    assert not servers.running
    assert all(p is not None and p.poll() is not None for p in processes)


INNER_CONFTEST = """
import json, os, subprocess, sys
import pytest
from live_servers import LiveServers, StopAfterLastUse
from radixgate.gateway.server_process import ServerProcess

started = {}


class Sleeping(ServerProcess):
    def start(self):
        self.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        return self


def start(flags, env):
    started[flags[0]] = server = Sleeping(flags, env=env).start()
    with open(os.environ["LAST_USE_LOG"], "a") as f:
        f.write(json.dumps(["started", flags[0], server.process.pid]) + "\\n")
    return server


def pytest_configure(config):
    config.pluginmanager.register(StopAfterLastUse(), "last-use")


@pytest.fixture(scope="session")
def live_server(pytestconfig):
    plugin = pytestconfig.pluginmanager.get_plugin("last-use")
    plugin.pool = LiveServers(4, start=start)
    yield lambda flags: plugin.pool.get(flags, acquirer=plugin.acquirer())
    plugin.pool.stop_all()


def pytest_runtest_logfinish(nodeid):  # after the item's teardown and the plugin's stops
    alive = sorted(name for name, s in started.items() if s.process is not None and s.process.poll() is None)
    with open(os.environ["LAST_USE_LOG"], "a") as f:
        f.write(json.dumps(["done", nodeid.split("::")[1], alive]) + "\\n")
"""

SERVER_FIXTURE = """
import pytest

@pytest.fixture(scope={scope!r})
def server(live_server):
    return live_server([{flag!r}])
"""

INNER_TESTS = {
    # a: two tests here and two in test_d.py (a fixture of its own, per test, the same flags)
    "test_a.py": SERVER_FIXTURE.format(scope="module", flag="a")
    + "def test_a1(server): pass\ndef test_a2(server): pass\ndef test_a_none(): pass\n",
    "test_d.py": SERVER_FIXTURE.format(scope="function", flag="a")
    + "def test_d1(server): pass\ndef test_d2(server): pass\n",
    # b: test_b_request could ask for `server` by name (request.getfixturevalue), so it counts as a user
    "test_b.py": SERVER_FIXTURE.format(scope="module", flag="b")
    + "def test_b1(server): pass\ndef test_b_request(request): pass\ndef test_b_none(): pass\n",
    # c: asked for by a test's body: only that test uses it
    "test_c.py": "def test_c_direct(live_server): live_server(['c'])\ndef test_c_after(): pass\n",
}
USERS = {"a": {"test_a1", "test_a2", "test_d1", "test_d2"}, "b": {"test_b1", "test_b_request"}, "c": {"test_c_direct"}}
# The tests that set each module's `server` up (the first of them to run does); b_request only might.
SETS_UP = [{"test_a1", "test_a2"}, {"test_d1", "test_d2"}, {"test_b1"}]


def test_each_server_stops_after_the_last_test_that_can_use_it(tmp_path: Path) -> None:
    """An inner pytest session (shuffled by pytest-randomly, two seeds) over real sleeping children:
    after each test, exactly the servers whose first user has run and whose last user is still to
    come are alive; a test that names none keeps none alive, and nothing outlives the session."""
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for name, text in INNER_TESTS.items():
        (tmp_path / name).write_text(text)
    pids, stopped_early = [], 0
    try:
        for seed in (1, 2):
            log = tmp_path / f"log-{seed}.jsonl"
            env = {
                **os.environ,
                "LAST_USE_LOG": str(log),
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                "PYTEST_ADDOPTS": "",  # the outer run's options are not the inner one's
                "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
            }
            args = ["-p", "randomly", "-p", "no:cacheprovider", f"--randomly-seed={seed}", "-q", str(tmp_path)]
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini"), *args],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            entries = [json.loads(line) for line in log.read_text().splitlines()]
            pids += [pid for kind, _, pid in entries if kind == "started"]
            order = [name for kind, name, _ in entries if kind == "done"]
            assert sorted(order) == sorted(
                set().union(*USERS.values()) | {"test_a_none", "test_b_none", "test_c_after"}
            )
            first = {flag: min(order.index(t) for t in users if t != "test_b_request") for flag, users in USERS.items()}
            last = {flag: max(map(order.index, users)) for flag, users in USERS.items()}
            # Until the last fixture taking live_server has run (and the test calling it), any flags may
            # still be asked for: nothing stops before that.
            asks = [min(map(order.index, tests)) for tests in SETS_UP] + [order.index("test_c_direct")]
            for t, (_, name, alive) in enumerate(e for e in entries if e[0] == "done"):
                expected = sorted(flag for flag in USERS if first[flag] <= t and (t < last[flag] or t < max(asks)))
                assert alive == expected, (seed, order, name)
                stopped_early += t < len(order) - 1 and any(first[flag] <= t for flag in set(USERS) - set(alive))
            assert sorted(name for kind, name, _ in entries if kind == "started") == ["a", "b", "c"]  # one each
        assert stopped_early  # not only at the session's end
        for pid in pids:  # every child stopped and reaped by the inner session
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
