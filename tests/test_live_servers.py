"""The session's live-server pool (tests/live_servers.py): one server per (flags, env), the least
recently used stopped when one more than the cap is needed, a dead one restarted, all stopped at the
end. Real child processes stand in for `radixgate serve`, so the bookkeeping is tested in a second."""

from __future__ import annotations

import subprocess
import sys

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
