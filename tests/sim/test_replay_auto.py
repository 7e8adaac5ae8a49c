"""The replay's automatic bidding option (issue #27), its pure parts: the mode, the
campaign body, one pass's figures from a replay report entry, and the targets."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.sim.replay_auto import (
    AUTO_BUDGET_MICROS,
    AUTO_CAP_MICROS,
    AutoMode,
    auto_body,
    auto_figures,
    by_ceiling,
    parse_mode,
    targets,
)


def test_modes() -> None:
    """Red when ``manual:0`` or a non-number is taken as a bid."""
    assert parse_mode("max_clicks") == AutoMode("max_clicks")
    assert parse_mode("manual:1234") == AutoMode("manual", 1234)
    assert parse_mode("ceiling") == AutoMode("max_clicks", ceiling=True)
    for bad in ("manual:0", "manual:x", "manual:-5", "manual", "target_cpa", "compare"):
        with pytest.raises(ValueError, match="--auto-bidding"):
            parse_mode(bad)


def test_bodies() -> None:
    """max_clicks leaves ``bid_micros`` to the server (derived: the cap); the twin bids
    its CPC with the same budget, pacing and targeting."""
    start = datetime(2013, 10, 19, tzinfo=UTC)
    auto = auto_body(AutoMode("max_clicks"), 1, start)
    twin = auto_body(AutoMode("manual", 777), 1, start)
    assert "bid_micros" not in auto and auto["bid_cap_micros"] == AUTO_CAP_MICROS
    assert twin["bid_micros"] == 777 and "bid_strategy" not in twin
    same = ("daily_budget_micros", "pacing_mode", "targeting", "bid_type", "time_zone")
    assert all(auto[k] == twin[k] for k in same)


_day = st.tuples(st.integers(0, 2 * AUTO_BUDGET_MICROS), st.integers(0, 20),
                 st.integers(0, 10**6), st.integers(0, 3 * AUTO_BUDGET_MICROS))


def _campaign(days: list[tuple[int, int, int, int]]) -> dict:
    return {"campaign_id": 10, "name": "auto-max_clicks", "bid_micros": AUTO_CAP_MICROS,
            "daily_budget_micros": AUTO_BUDGET_MICROS,
            "billed_micros": sum(d[0] for d in days), "clicks": sum(d[1] for d in days),
            "impressions": 0,
            "days": [{"date": f"2013-10-{19 + i}", "billed_micros": b, "clicks": c,
                      "absorbed_overspend_micros": a, "potential_micros": p}
                     for i, (b, c, a, p) in enumerate(days)]}


@given(st.lists(_day, min_size=1, max_size=7))
def test_figures(days: list[tuple[int, int, int, int]]) -> None:
    """A day is above budget when it billed more or absorbed any overspend; judged when
    its potential at λ = 1 reaches 1.05 × the budget; the average CPC is billed ÷
    clicks. Red when absorbed overspend is not counted as above budget."""
    f = auto_figures(_campaign(days), None, [])
    above = [f"2013-10-{19 + i}" for i, (b, _, a, _) in enumerate(days)
             if b > AUTO_BUDGET_MICROS or a > 0]
    assert f["days_above_budget"] == above
    assert f["traffic_allows_days"] == sum(p >= 1.05 * AUTO_BUDGET_MICROS
                                           for *_, p in days)
    clicks = sum(d[1] for d in days)
    assert f["avg_cpc_micros"] == (round(sum(d[0] for d in days) / clicks) if clicks
                                   else None)
    verdicts = [t["met"] for t in targets(f, f)]
    assert verdicts[1] == (not above)
    assert verdicts[2] is False  # the same clicks are not more


def test_every_day_of_the_rows_and_the_ceiling_judges() -> None:
    """A day of the rows the ledger has nothing of is reported with zeros; with a
    ceiling pass a day is judged by what the campaign billed at λ = 1 there, not by the
    potential model. Red when the ceiling's day spend is not compared with 1.05 × the
    budget."""
    f = auto_figures(_campaign([(AUTO_BUDGET_MICROS, 4, 0, 0)]), None,
                     ["2013-10-19", "2013-10-20"])
    assert [d["date"] for d in f["days"]] == ["2013-10-19", "2013-10-20"]
    assert f["days"][1]["billed_micros"] == 0 and f["budget_micros"] == 2 * AUTO_BUDGET_MICROS
    top = {"days": [{"date": "2013-10-19", "billed_micros": round(1.05 * AUTO_BUDGET_MICROS)},
                    {"date": "2013-10-20", "billed_micros": AUTO_BUDGET_MICROS}]}
    g = by_ceiling(f, top)
    assert [d["traffic_allows"] for d in g["days"]] == [True, False]
    assert (g["traffic_allows_days"], g["met_days"], g["allowed_share"]) == (1, 1, 1.0)
