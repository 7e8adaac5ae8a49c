"""Every day-simulation scenario in its short form (a ~30-minute window, seconds of CPU).

Full-day figures are benchmarks (``run_simulation(name)``), not tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adfunnel.sim.day import run_simulation
from adfunnel.sim.scenarios import scenarios


def _by_id(result: dict) -> dict[int, dict]:
    return {c["campaign_id"]: c for c in result["campaigns"]}


@pytest.mark.parametrize("name", sorted(scenarios()))
def test_short_scenario_never_bills_above_budget(name: str) -> None:
    r = run_simulation(name, short=True)
    assert r["scenario"] == name
    for c in r["campaigns"]:
        assert c["billed_above_budget_micros"] == 0
        assert c["absorbed_overspend_micros"] <= 0.01 * c["daily_budget_micros"]
        assert c["max_steps_at_floor"] <= 1
        # an exhausted campaign takes part in no auction 30 s later; a paused one 1 s later
        if c["last_auction_after_exhausted_s"] is not None:
            assert c["last_auction_after_exhausted_s"] <= 30.0
        if c["last_auction_after_pause_s"] is not None:
            assert c["last_auction_after_pause_s"] <= 1.0
        if c["pacing_mode"] == "accelerated":
            assert c["max_hourly_curve_error"] is None  # follows no curve
        for key in ("campaign_id", "time_zone", "daily_budget_micros", "billed_micros",
                    "delivered_share", "traffic_allows", "max_hourly_curve_error"):
            assert key in c
    camps = _by_id(r)
    if name == "viral":
        assert camps[1]["p_min"] < 0.05  # x30 traffic: p follows it down
    if name == "budget-cut":
        assert camps[1]["daily_budget_micros"] == 6_000_000_000
    if name == "budget-raise":
        assert camps[2]["daily_budget_micros"] == 15_000_000_000
    if name == "server-crash":
        assert r["crash"] is not None and r["crash"]["slices_held"] >= 1
    if name == "exhaustion":  # the stop after exhaustion is measured, not vacuous
        for cid in (60, 61):
            assert camps[cid]["exhausted_at"] is not None
            assert camps[cid]["final_status"] == "exhausted"
    if name == "pause":
        assert camps[5]["paused"] and camps[5]["serves"] > 0
    if name == "small-budget":
        assert camps[20]["absorbed_overspend_micros"] == 0


def test_report_and_plots_are_written(tmp_path: Path) -> None:
    r = run_simulation("midnight", report_path=tmp_path / "r.json", plots_dir=tmp_path / "p",
                       short=True)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["scenario"] == "midnight" and len(data["campaigns"]) == len(r["campaigns"])
    assert list((tmp_path / "p").glob("*.png"))


def test_unknown_scenario() -> None:
    with pytest.raises(KeyError):
        run_simulation("nope", short=True)
