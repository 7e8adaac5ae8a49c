"""Availability forecasts (issue #26): a bounded sample of recent ad requests, kept by
default (:mod:`~adfunnel.forecast.sample`, :mod:`~adfunnel.forecast.store`), and the pure
forecast over it (:mod:`~adfunnel.forecast.project`, :mod:`~adfunnel.forecast.availability`).
"""
