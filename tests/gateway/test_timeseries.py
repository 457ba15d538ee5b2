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


def test_a_tenants_points_count_its_requests_only() -> None:
    clock = Clock()
    series = TimeSeries(window_s=60, clock=clock)
    series.record(100, 80, 4, 0.1, tenant="a")
    series.record(100, 0, 4, 0.9, tenant="b")
    series.record_embeddings(12, tenant="a")
    clock.now += 1
    series.sample({"token_usage": 0.25, "cache_hit_rate": 0.4})
    everyone, a, b = series.points(), series.points("a"), series.points("b")
    assert [p["requests"] for p in everyone] == [3, 0] and [p["requests"] for p in a] == [2, 0]
    assert a[0]["hit_rate"] == 0.8 and b[0]["hit_rate"] == 0.0 and everyone[0]["hit_rate"] == 0.4
    assert a[0]["ttft_p99"] == 0.1 and everyone[0]["ttft_p99"] == 0.9
    assert a[0]["embedding_tokens_per_s"] == 12 and b[0]["embedding_tokens_per_s"] == 0
    assert a[1]["cumulative_hit_rate"] == 0.8 and everyone[1]["cumulative_hit_rate"] == 0.4  # own sums / the engine's
    assert a[1]["token_usage"] == b[1]["token_usage"] == 0.25  # a level: the server's
    assert series.points("nobody")[0]["requests"] == 0
