"""The calibration monitor: predicted ÷ observed clicks over a model's recent billed
impressions, unmeasured before any click, out of range outside 0.95-1.05."""

from __future__ import annotations

import pytest

from adfunnel.billing.model import EventType
from adfunnel.prediction.calibration import CalibrationMonitor


def row(impression_id: str, event_type: EventType = EventType.IMPRESSION) -> tuple[str, str]:
    """A billed ledger row's plain values, as the wiring passes them to the monitor."""
    return impression_id, event_type


def test_predicted_over_observed_for_each_model() -> None:
    m = CalibrationMonitor(window=100)
    for k in range(10):
        m.served(f"a{k}", "v1", 0.2)  # 10 × 0.2 = 2 predicted clicks
        m.served(f"b{k}", "v2", 0.5)
    for k in range(10):
        m.billed(*row(f"a{k}"))
        m.billed(*row(f"b{k}"))
    assert m.status()["v1"]["status"] == "unmeasured"
    assert m.status()["v1"]["calibration_ratio"] is None  # no click yet: not 0
    m.billed(*row("a0", EventType.CLICK))
    m.billed(*row("a1", EventType.CLICK))
    m.billed(*row("a1", EventType.CLICK))  # the same click again counts once
    for k in range(4):
        m.billed(*row(f"b{k}", EventType.CLICK))
    got = m.status()
    assert got["v1"] == {"impressions": 10, "predicted_clicks": 2.0, "observed_clicks": 2,
                         "calibration_ratio": 1.0, "status": "ok"}
    assert got["v2"]["calibration_ratio"] == pytest.approx(5 / 4)
    assert got["v2"]["status"] == "out_of_range"


def test_only_the_recent_window_counts_and_unscored_events_are_ignored() -> None:
    m = CalibrationMonitor(window=3)
    for k in range(5):
        m.served(f"i{k}", "v", 0.5)
        m.billed(*row(f"i{k}"))
    m.billed(*row("i0", EventType.CLICK))  # left the window: not counted
    m.billed(*row("i4", EventType.CLICK))
    m.billed(*row("stranger"))  # an impression no model scored
    m.billed(*row("stranger", EventType.CLICK))
    got = m.status()["v"]
    assert (got["impressions"], got["predicted_clicks"], got["observed_clicks"]) == (3, 1.5, 1)


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        CalibrationMonitor(window=0)
    with pytest.raises(ValueError):
        CalibrationMonitor(low=1.1)
