"""The dashboard's per-second history."""

from __future__ import annotations

from radixgate.gateway.observe.timeseries import TimeSeries, percentile


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0


def test_points_cover_quiet_seconds_and_window() -> None:
    clock = Clock()
    series = TimeSeries(window_s=5, clock=clock)
    series.record(100, 50, 10, 0.2)
    series.record(100, 100, 10, 0.4)
    clock.now += 2
    series.sample({"token_usage": 0.5, "cache_hit_rate": 0.75})
    points = series.points()
    assert [p["t"] for p in points] == [1000, 1001, 1002]
    assert points[0]["hit_rate"] == 0.75 and points[0]["output_tokens_per_s"] == 20
    assert points[1]["hit_rate"] is None and points[1]["requests"] == 0
    assert points[2]["ttft_p50"] == 0.2 and points[2]["ttft_p99"] == 0.4
    assert points[2]["token_usage"] == 0.5
    clock.now += 10
    assert [p["t"] for p in series.points()] == [1012]
