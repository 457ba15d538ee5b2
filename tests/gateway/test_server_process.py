"""The one server launcher: the child picks its port, and a failed start says why."""

from __future__ import annotations

import pytest

from radixgate.gateway.server_process import ServerProcess


def test_a_server_that_cannot_start_reports_its_output() -> None:
    server = ServerProcess(["--no-such-flag"], startup_timeout_s=60)
    with pytest.raises(RuntimeError, match="unrecognized arguments: --no-such-flag"):
        server.start()
    assert server.process is None  # stopped, nothing left running
    assert server.command[-1] == "--no-such-flag" and "--port" in server.command
