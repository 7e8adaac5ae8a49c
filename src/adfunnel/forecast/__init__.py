"""Availability forecasts (issue #26): a bounded sample of recent ad requests, kept by
default (:mod:`~adfunnel.forecast.sample`, :mod:`~adfunnel.forecast.store`), and the pure
forecast over it (:mod:`~adfunnel.forecast.project`, :mod:`~adfunnel.forecast.availability`).

Why a sample of its own: the served log (:mod:`adfunnel.events.served_log`) holds each
committed decision's user attributes, but it is off by default (``served_log_dir``),
file-based (raw hours, then Parquet) and records decisions rather than every request
(a shed request is missing); the eligible-traffic log
(:mod:`adfunnel.pacing.traffic_log`) counts requests per *existing* campaign and hour,
so it cannot evaluate a targeting nobody has booked yet. The sample keeps what a
forecast needs — each request's targeting view, time and weight — in the server's own
database, bounded (``forecast_sample_per_hour`` × ``forecast_history_days``).
"""
