"""End to end: ``replay --learn --catalogue 300`` on every 16th row of the real iPinYou
trace — train on the served log of the days before the last, roll the model out through
the store, serve the last day with it, and report the model next to the smoothed-rate
baseline and the pre-rank's recall (the catalogue gives requests more candidates than the
pre-rank keeps)."""

from __future__ import annotations

import pytest

from adfunnel.sim.ipinyou import load_rows
from adfunnel.sim.learn import AttributeClicks, split_last_day
from adfunnel.sim.replay import run_replay

pytestmark = pytest.mark.e2e

# A small catalogue and a pre-rank cut to match, to keep the run short: a 300x250 request
# meets ~80 candidates and the pre-rank keeps 50 (README gives 2,000 campaigns and 200)
CATALOGUE = 300
PRERANK_KEEP = 50


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    rows = load_rows()[::16]
    return run_replay(rows, workdir=tmp_path_factory.mktemp("learn"), learn=True,
                      catalogue=CATALOGUE,
                      server_env={"ADFUNNEL_PRERANK_KEEP": str(PRERANK_KEEP)})


def test_the_last_day_is_served_by_the_model_trained_on_the_days_before(report: dict) -> None:
    m = report["model"]
    assert m is not None and m["version"]
    assert m["trained_rows"] > 0 and m["trained_clicks"] >= 5
    assert m["last_day_rows"] > 0  # rendered winners the model decided
    assert 0.0 <= m["fallback_share"] <= 1.0
    for figures in (m, m["baseline"]):  # measured, the same rows for both
        assert figures["normalized_entropy"] is not None
        assert figures["calibration_ratio"] is not None
    assert m["baseline"]["rows"] == m["last_day_rows"]
    # the ratio of the pCTR used, the raw model's beside it, per day; the factors in use
    assert m["raw_calibration_ratio"] is not None and m["calibration_by_day"]
    low, high = m["calibration_ratio_95"]  # the used ratio's interval holds it
    assert low < m["calibration_ratio"] < high
    assert m["recalibration"]["versions"].keys() <= {m["version"]}
    assert "attribute" in report["click_model"]


def test_the_click_model_depends_on_the_row_only() -> None:
    rows = load_rows()[:500]
    a, b = AttributeClicks(7), AttributeClicks(7)
    rates = [a.rate(r) for r in rows]
    assert rates == [b.rate(r) for r in rows]  # the same seed, the same rates
    assert len(set(rates)) > 20 and 0.001 < sum(rates) / len(rates) < 0.2
    assert [AttributeClicks(8).rate(r) for r in rows] != rates
    with pytest.raises(ValueError, match="at least two days"):
        split_last_day(rows[:10])


def test_the_prerank_keeps_the_models_best_candidate(report: dict) -> None:
    m = report["model"]
    # every model decision with more candidates than the pre-rank keeps was checked
    assert m["prerank_recall_checked"] >= 5
    assert m["prerank_recall"] >= 0.95  # the target
    catalogue = report["catalogue"]
    assert catalogue["campaigns"] == CATALOGUE
    assert 0 < catalogue["filled_slots"] <= report["filled_slots"]

