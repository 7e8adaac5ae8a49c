"""The pure flight plan (adfunnel.pacing.flight): sums, caps, dayparts, frontloading,
re-plans after under- and over-delivery, average_day allotments."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.campaigns.model import Daypart
from adfunnel.pacing.flight import (
    CATCH_UP_CAP,
    FlightPlan,
    average_day_allotment,
    day_allotment,
    flight_hours,
    month_cap,
    month_days,
    plan_shares,
    replan,
)

SHAPE = [1.0] * 7 + [10.0] * 14 + [2.0] * 3  # dense daytime
THREE = (Daypart(tuple(range(7)), 6, 9), Daypart(tuple(range(7)), 12, 15),
         Daypart(tuple(range(7)), 18, 21))


def _hours(days: int = 7, tz: str = "UTC", dayparts: tuple[Daypart, ...] = (),
           shape: list[float] = SHAPE):
    return flight_hours(date(2026, 3, 2), date(2026, 3, 1 + days), tz, shape, dayparts)


def test_a_flight_ends_at_23_30_local_on_its_last_day() -> None:
    h = _hours(7)
    assert len(h) == 7 * 24  # 167 whole hours and the half hour 23:00-23:30
    assert h.end_s[-1] - h.start_s[-1] == 1800
    assert datetime.fromtimestamp(h.end_s[-1], UTC) == datetime(2026, 3, 8, 23, 30, tzinfo=UTC)


def test_a_dst_day_has_its_wall_clock_hours() -> None:
    # Europe/Berlin springs forward on 29 March 2026: a 23-hour day
    h = flight_hours(date(2026, 3, 28), date(2026, 3, 29), "Europe/Berlin", SHAPE)
    by_day = {d: int((h.day == d).sum()) for d in np.unique(h.day).tolist()}
    assert by_day == {date(2026, 3, 28).toordinal(): 24, date(2026, 3, 29).toordinal(): 23}


def test_the_plan_is_zero_outside_dayparts_and_sums_to_the_budget() -> None:
    h = _hours(7, dayparts=THREE)
    plan = FlightPlan(h, 7_000_000_000)
    rates = plan.rates()
    hod = ((h.start_s - h.start_s[0]) // 3600 % 24).astype(int)
    inside = np.isin(hod, [6, 7, 8, 12, 13, 14, 18, 19, 20])
    assert rates[~inside].sum() == 0
    assert rates.sum() == pytest.approx(7_000_000_000)
    # each window carries its traffic's part: the evening one is not starved
    evening = rates[np.isin(hod, [18, 19, 20])].sum()
    assert evening > 0.25 * rates.sum()


def test_frontloaded_puts_60_percent_in_the_first_half() -> None:
    h = _hours(6)
    share = plan_shares(h, frontloaded=True)
    half = 0.5 * (h.start_s + h.end_s) < 0.5 * (h.start_s[0] + h.end_s[-1])
    assert share[half].sum() == pytest.approx(0.6)
    assert share.sum() == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(days=st.integers(1, 10), budget=st.integers(1, 10**12),
       front=st.booleans(), parted=st.booleans(),
       tz=st.sampled_from(["UTC", "Asia/Tokyo", "America/New_York", "Asia/Kolkata"]))
def test_plan_sums_to_the_budget_at_flight_end(days: int, budget: int, front: bool,
                                               parted: bool, tz: str) -> None:
    h = _hours(days, tz, THREE if parted else ())
    plan = FlightPlan(h, budget, frontloaded=front)
    assert plan.target(h.end_s[-1]) == pytest.approx(budget, rel=1e-9)
    assert plan.target(h.start_s[0]) == 0
    # every day's allotment from the start adds up to at most the budget
    days_ = np.unique(h.day).tolist()
    total = sum(day_allotment(plan, h.start_s[0], 0, 0, d) for d in days_)
    assert budget - len(days_) <= total <= budget


@settings(max_examples=80, deadline=None)
@given(budget=st.integers(10**6, 10**12), at=st.floats(0.0, 0.999),
       delivered=st.floats(0.0, 2.0), front=st.booleans())
def test_a_replan_never_exceeds_1_5x_the_plan_nor_what_is_left(
        budget: int, at: float, delivered: float, front: bool) -> None:
    h = _hours(7, dayparts=THREE)
    plan = FlightPlan(h, budget, frontloaded=front)
    now = h.start_s[0] + at * (h.end_s[-1] - h.start_s[0])
    spent = int(plan.target(now) * delivered)
    rest = replan(plan, now, spent)
    due = plan.rates() * h.rest_fraction(now)
    assert (rest <= CATCH_UP_CAP * due + 1e-6).all()
    assert rest.sum() <= max(0, budget - spent) * (1 + 1e-12) + 1e-6  # float sums
    assert (rest >= 0).all()
    if delivered <= 1.0 and due.sum() > 0:  # behind or on plan: all of it is planned
        # unless the cap binds
        want = min(budget - spent, CATCH_UP_CAP * due.sum())
        assert rest.sum() == pytest.approx(want, rel=1e-9, abs=1e-3)


def test_under_delivery_is_spread_and_over_delivery_lowers_the_rest() -> None:
    h = _hours(7)
    plan = FlightPlan(h, 7_000_000_000)
    mid = h.start_s[0] + 3 * 86400
    on_plan = replan(plan, mid, int(plan.target(mid)))
    behind = replan(plan, mid, int(plan.target(mid) * 0.9))
    ahead = replan(plan, mid, int(plan.target(mid) * 1.1))
    assert behind.sum() > on_plan.sum() > ahead.sum()
    assert on_plan.sum() == pytest.approx(7_000_000_000 - int(plan.target(mid)), rel=1e-9)
    # ahead by 10 %: the rest is lowered by exactly the excess
    assert ahead.sum() == pytest.approx(7_000_000_000 - int(plan.target(mid) * 1.1), rel=1e-9)
    # far behind: the cap holds, the rest is not blown into one evening
    late = replan(plan, h.start_s[0] + 6 * 86400, 0)
    assert (late <= 1.5 * plan.rates() + 1e-6).all()


def test_an_edit_rescales_the_rest_of_the_flight() -> None:
    h = _hours(7)
    plan = FlightPlan(h, 7_000_000_000)
    mid = h.start_s[0] + 2 * 86400
    spent = int(plan.target(mid))
    raised = plan.edited(mid, spent, budget=14_000_000_000)
    assert raised.target(h.end_s[-1]) == pytest.approx(14_000_000_000)
    assert replan(raised, mid, spent).sum() == pytest.approx(14_000_000_000 - spent)


def test_day_allotment_counts_todays_spend_and_the_ceiling() -> None:
    h = _hours(2)
    plan = FlightPlan(h, 2_000_000)
    d0 = int(h.day[0])
    assert day_allotment(plan, h.start_s[0], 0, 0, d0) == pytest.approx(1_000_000, abs=60_000)
    assert day_allotment(plan, h.start_s[0], 0, 0, d0, day_ceiling=300_000) == 300_000
    noon = h.start_s[0] + 12 * 3600
    allot = day_allotment(plan, noon, 400_000, 400_000, d0)
    assert 400_000 < allot <= 2_000_000


@settings(max_examples=200, deadline=None)
@given(daily=st.integers(1, 10**10), day=st.integers(0, 30),
       billed=st.lists(st.integers(0, 3), min_size=31, max_size=31))
def test_average_day_never_above_2x_nor_the_month_cap(daily: int, day: int,
                                                      billed: list[int]) -> None:
    # whatever was billed before (as multiples of the allotments), today's allotment
    # keeps the day <= 2x and the month <= 30.4x
    before = 0
    for d in range(day):
        allot = average_day_allotment(daily, d, 31 - d, before)
        before += min(allot, allot * billed[d] // 2)
    allot = average_day_allotment(daily, day, 31 - day, before)
    assert 0 <= allot <= 2 * daily
    assert before + allot <= month_cap(daily)


def test_average_day_catches_up_the_month_under_spend() -> None:
    assert average_day_allotment(1000, 0, 30, 0) == 1000
    assert average_day_allotment(1000, 10, 20, 5000) == 1250  # 5000 behind over 20 days
    assert average_day_allotment(1000, 29, 1, 0) == 2000  # at most 2x
    assert average_day_allotment(1000, 10, 20, 12000) == 900  # ahead: lower
    assert month_days(date(2026, 2, 14)) == (date(2026, 2, 1), date(2026, 2, 28))


def test_day_weights_add_up_the_days_hours_and_the_dst_hour() -> None:
    from adfunnel.pacing.flight import day_weights

    hours = flight_hours(date(2026, 10, 24), date(2026, 10, 26), "Europe/Berlin", [1.0] * 24)
    dst = day_weights(hours, date(2026, 10, 25).toordinal(), "Europe/Berlin")
    assert dst.sum() == pytest.approx(25.0) and dst[2] == pytest.approx(2.0)
    last = day_weights(hours, date(2026, 10, 26).toordinal(), "Europe/Berlin")
    assert last[23] == pytest.approx(0.5) and last.sum() == pytest.approx(23.5)
    assert day_weights(hours, date(2026, 10, 27).toordinal(), "Europe/Berlin").sum() == 0


@given(st.lists(st.floats(0, 10), min_size=24, max_size=24),
       st.lists(st.floats(0, 10), min_size=24, max_size=24), st.integers(0, 23))
def test_rest_drift_is_a_share_of_the_rest_of_the_day(a: list[float], b: list[float],
                                                     hour: int) -> None:
    from adfunnel.pacing.flight import rest_drift

    d = rest_drift(np.array(a), np.array(b), hour)
    assert 0.0 <= d <= 1.0 + 1e-9
    assert rest_drift(np.array(a), np.array(a) * 3.0, hour) == pytest.approx(0.0, abs=1e-9)
