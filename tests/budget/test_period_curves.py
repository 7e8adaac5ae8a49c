"""Curves and gates of campaigns with budget periods, dayparts or frontloading (fast,
no simulation): a dayparted curve is flat outside its windows, a frontloaded day puts
60 % in its first half, a flight day's budget is its allotment, and a gate that holds
committed spend itself admits a flight without a daily ceiling up to its money."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest

from adfunnel.budget.gate import BUDGET_EXHAUSTED, LocalSpendGate, Served
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.model import (
    BidType,
    BudgetPeriod,
    Campaign,
    Daypart,
    Objective,
    PacingMode,
)
from adfunnel.clock import ManualClock

NOW = datetime(2026, 3, 2, 0, 0, 5, tzinfo=UTC)
EVERY = tuple(range(7))
THREE = (Daypart(EVERY, 6, 9), Daypart(EVERY, 12, 15), Daypart(EVERY, 18, 21))


def _camp(**kw: object) -> Campaign:
    base: dict[str, object] = {"daily_budget_micros": 1_000_000_000}
    base.update(kw)
    return Campaign(1, 1, "c", Objective.CLICKS, BidType.CPC, 100_000,
                    time_zone="UTC", flight_start=date(2026, 3, 1), **base)  # type: ignore[arg-type]


def _plan_shares(c: Campaign) -> list[float]:
    svc = BudgetService(ManualClock(NOW), warmup_s=0.0)
    svc.upsert_campaign(c)
    cd = svc.current(1, NOW.timestamp())
    assert cd is not None
    plan = cd.plan
    return [plan.target_micros(h * 3600.0) / plan.budget_micros for h in range(25)]


def test_a_dayparted_curve_is_flat_outside_its_windows_and_fills_all_three() -> None:
    s = _plan_shares(_camp(dayparts=THREE))
    assert s[6] == pytest.approx(0.0, abs=1e-9) and s[9] - s[6] == pytest.approx(1 / 3, abs=0.02)
    assert s[12] - s[9] == pytest.approx(0.0, abs=1e-9)
    assert s[21] - s[18] == pytest.approx(1 / 3, abs=0.02)  # the last window gets its third
    assert s[24] == pytest.approx(1.0)


def test_a_frontloaded_day_puts_60_percent_in_its_first_half() -> None:
    s = _plan_shares(_camp(pacing_mode=PacingMode.FRONTLOADED))
    # the curve ends at 23:30: the second half's last half hour carries nothing
    assert s[12] == pytest.approx(0.6 / (0.6 + 0.4 * 23 / 24), abs=0.01)
    even = _plan_shares(_camp())
    assert even[12] == pytest.approx(12 / 23.5, abs=0.01)


def test_a_flight_day_budget_is_its_allotment_not_the_daily_budget() -> None:
    c = _camp(daily_budget_micros=0, flight_end=date(2026, 3, 11),
              budget_period=BudgetPeriod.FLIGHT, flight_budget_micros=10_000_000_000)
    svc = BudgetService(ManualClock(NOW), warmup_s=0.0)
    svc.upsert_campaign(c)
    cd = svc.current(1, NOW.timestamp())
    assert cd is not None
    # the flight started yesterday (nothing spent): 10 days left of the plan, the flat
    # shape's first day a little more than a tenth (23.5 h a day, 23.5 h the last)
    assert cd.day_budget() == pytest.approx(1_000_000_000, rel=0.05)
    assert cd.plan.budget_micros == cd.day_budget()


def test_the_local_gate_admits_a_flight_without_a_ceiling_up_to_its_money() -> None:
    gate = LocalSpendGate()
    c = _camp(daily_budget_micros=0, flight_end=date(2026, 3, 11),
              budget_period=BudgetPeriod.FLIGHT, flight_budget_micros=250_000)
    admitted = 0
    for k in range(5):
        at = NOW + timedelta(days=k % 2)
        if gate.admit(c, at, 100_000) is not None:
            continue
        gate.record_served(Served(1, at.date(), f"i{k}", 100_000, at.timestamp() + 60))
        gate.record_billed(1, at.date(), 100_000, f"i{k}", True)
        admitted += 1
    assert admitted == 2
    assert gate.admit(c, NOW, 100_000) == BUDGET_EXHAUSTED


def test_a_day_campaign_made_a_flight_today_gets_its_allotment_and_back() -> None:
    svc = BudgetService(ManualClock(NOW), warmup_s=0.0)
    day = _camp(daily_budget_micros=300_000_000)
    svc.upsert_campaign(day)
    assert svc.current(1, NOW.timestamp()).day_budget() == 300_000_000  # type: ignore[union-attr]
    flight = replace(day, version=2, daily_budget_micros=0, flight_end=date(2026, 3, 11),
                     budget_period=BudgetPeriod.FLIGHT, flight_budget_micros=10_000_000_000)
    svc.upsert_campaign(flight)
    cd = svc.current(1, NOW.timestamp())
    assert cd is not None and cd.day_budget() == pytest.approx(1_000_000_000, rel=0.05)
    svc.upsert_campaign(replace(day, version=3))
    assert cd.day_budget() == 300_000_000 and cd.plan.budget_micros == 300_000_000


def test_the_day_view_shows_a_flights_period() -> None:
    from adfunnel.budget.days import day_view

    svc = BudgetService(ManualClock(NOW), warmup_s=0.0)
    svc.upsert_campaign(_camp(daily_budget_micros=0, flight_end=date(2026, 3, 11),
                              budget_period=BudgetPeriod.FLIGHT,
                              flight_budget_micros=10_000_000_000))
    view = day_view(svc, 1, NOW.timestamp())
    assert view is not None and view["period"]["budget_micros"] == 10_000_000_000
    assert view["period"]["allotment_micros"] == view["budget_micros"]
    svc.upsert_campaign(_camp(version=2))
    assert day_view(svc, 1, NOW.timestamp())["period"] is None  # type: ignore[index]
