"""The replay report's calibration figures: the ratio of the pCTR serving used, the raw
model's beside it (its own pCTR before the factor), per UTC day."""

from __future__ import annotations

import pytest

from adfunnel.sim.learn import calibration_by_day, calibration_of

DAY = 86_400.0


def test_used_and_raw_ratios_and_the_factor_between_them() -> None:
    """Red when the raw ratio reads the used pCTR (0.3 instead of 0.35), or when a row
    the model did not score is left out of the raw sum."""
    rows = [{"time": 0.0, "pctr": 0.1, "model_pctr": 0.2, "clicked": True},
            {"time": 0.0, "pctr": 0.1, "model_pctr": 0.2, "clicked": False},
            {"time": DAY, "pctr": 0.05, "model_pctr": None, "clicked": True}]
    got = calibration_of(rows)
    assert got["clicks"] == 2
    assert got["calibration_ratio"] == pytest.approx(0.25 / 2)
    assert got["raw_calibration_ratio"] == pytest.approx(0.45 / 2)
    assert got["factor"] == pytest.approx(0.25 / 0.45, abs=1e-4)
    assert got["recalibrated"]["rows"] == 2  # served with a factor other than 1
    days = calibration_by_day(rows)
    assert list(days) == ["1970-01-01", "1970-01-02"]
    assert days["1970-01-02"]["raw_calibration_ratio"] == 0.05
    assert calibration_of([])["calibration_ratio"] is None  # no click: unmeasured, not 0
