"""The replay report's calibration figures: the ratio of the pCTR serving used, the raw
model's beside it (its own pCTR before the factor), per UTC day."""

from __future__ import annotations

import pytest

from adfunnel.sim.learn import calibration_by_day, calibration_of, ratio_interval

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


def test_the_ratios_interval_is_the_exact_poisson_one() -> None:
    """36 clicks against 31.6 predicted (the replay's last day): about 0.61-1.22, the
    published exact interval of a count of 36 being 25.21-49.84 (Garwood; e.g. the
    tables of Sahai and Khurshid 1993). Red when the interval is not turned over (the
    count's bounds divided the wrong way) or the degrees of freedom are off by one."""
    low, high = ratio_interval(31.6, 36)
    assert low == pytest.approx(31.6 / 49.84, abs=2e-3)
    assert high == pytest.approx(31.6 / 25.21, abs=2e-3)
    assert ratio_interval(1.0, 0) is None
    got = calibration_of([{"time": 0.0, "pctr": 0.5, "clicked": True}])
    assert got["calibration_ratio_95"] == ratio_interval(0.5, 1)
