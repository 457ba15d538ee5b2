"""bench pd-interference's run-queue figure: which thread it reads and what it divides by."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from radixgate.bench.pd_interference import _loop_wait_share, _threads


def test_the_share_is_the_busiest_threads_wait_over_the_wall_time():
    before = {"10": (100, 1.0), "11": (50, 0.0), "12": (0, 0.0)}
    after = {"10": (110, 1.5), "11": (450, 2.0), "13": (999, 9.0)}  # 11 used the most CPU in between
    assert _loop_wait_share(before, after, wall=4.0) == pytest.approx(0.5)
    assert _loop_wait_share({}, after, wall=4.0) is None  # no thread seen at both ends


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_threads_reads_every_thread_of_a_live_process():
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        seen = _threads(os.getpid())
        assert {str(threading.get_native_id()), str(worker.native_id)} <= set(seen)
        assert all(cpu >= 0 and waited >= 0 for cpu, waited in seen.values())
    finally:
        stop.set()
        worker.join()
    assert _threads(None) == {}
