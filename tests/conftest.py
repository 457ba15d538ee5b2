"""Settings for every test: off the network, one torch thread per process. Imports nothing heavy:
the SDK and linter tests run without torch; engine fixtures live in tests/engine/conftest.py."""

from __future__ import annotations

import os

# Keep the test suite's threads to the machine's two cores and off the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Servers started by tests and the test process share two cores: one torch thread each avoids
# OpenMP threads spinning against each other (a 5x slowdown when the cores are oversubscribed).
# The engine reads RADIXGATE_NUM_THREADS when it starts.
os.environ.setdefault("RADIXGATE_NUM_THREADS", "1")
# Every engine a test starts (and each test server's) takes the process's one parsed tokenizer instead
# of a deep copy of it (engine/models/loader.py): read-only, it saves most of a second per engine.
os.environ.setdefault("RADIXGATE_SHARE_TOKENIZER", "1")

# Hypothesis: CI replays the same examples every run (a red CI run is reproducible and a green one is not
# luck); locally each run draws new ones. `--hypothesis-profile deep` searches harder, and
# `--hypothesis-seed N` (printed on failure) replays a local run.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.register_profile("deep", max_examples=1000, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")


# Live servers: `live_server(flags, env=...)` in any test (or a module's own `server` fixture) returns
# a running `radixgate serve` on 127.0.0.1 and a free port, shared by every test of the session that
# asks for the same flags and environment; at most 4 run at once (the least recently used stops),
# each stops after the last test that can use a fixture that asked for it (live_servers.StopAfterLastUse),
# and all stop when the session ends. Tests sharing one warm or flush their own prefixes.
from collections.abc import Callable, Iterator, Mapping, Sequence  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

import pytest  # noqa: E402

if TYPE_CHECKING:
    from radixgate.gateway.server_process import ServerProcess

MAX_LIVE_SERVERS = 4
LAST_USE_PLUGIN = "live-servers-stop-after-last-use"


def pytest_configure(config: pytest.Config) -> None:
    from live_servers import StopAfterLastUse

    config.pluginmanager.register(StopAfterLastUse(), LAST_USE_PLUGIN)


@pytest.fixture(scope="session")
def live_server(pytestconfig: pytest.Config) -> Iterator[Callable[..., ServerProcess]]:
    """`live_server(flags: Sequence[str] = (), *, env=None) -> ServerProcess` (running, shared)."""
    from live_servers import LiveServers

    servers = LiveServers(MAX_LIVE_SERVERS)
    last_use = pytestconfig.pluginmanager.get_plugin(LAST_USE_PLUGIN)
    last_use.pool = servers

    def get(flags: Sequence[str] = (), *, env: Mapping[str, str] | None = None) -> ServerProcess:
        return servers.get(flags, env=env, acquirer=last_use.acquirer())

    try:
        yield get
    finally:
        last_use.pool = None
        servers.stop_all()
