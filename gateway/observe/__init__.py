"""Observability: Prometheus metrics, OpenTelemetry traces, per-template prompt statistics, the
dashboard and its time series."""
