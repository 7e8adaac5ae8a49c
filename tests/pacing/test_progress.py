"""A guaranteed line's progress against its plan (adfunnel.pacing.progress, and the plan's
figure per local day, ``FlightPlan.day_planned``): the projection rule's invariants,
the recent ratio's fallbacks, the state's thresholds, money → goal events."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.pacing.flight import FlightPlan, flight_hours
from adfunnel.pacing.progress import (
    PACE_BAND,
    events_of_micros,
    line_progress,
    progress_state,
    projected_final,
    recent_ratio,
)

SHAPE = [1.0] * 7 + [10.0] * 14 + [2.0] * 3
counts = st.integers(min_value=0, max_value=10**9)


@settings(max_examples=300, deadline=None)
@given(goal=st.integers(min_value=1, max_value=10**9), delivered=counts, planned=counts,
       plan_total=counts, ratio=st.floats(min_value=0, max_value=1e6, allow_nan=False),
       ended=st.booleans())
def test_the_projection_is_never_above_the_goal_nor_below_delivered(
        goal: int, delivered: int, planned: int, plan_total: int, ratio: float,
        ended: bool) -> None:
    """Mutation that turns it red: the ``min(goal, …)`` cap dropped (a line ahead of its
    plan projects above its goal), or the ended branch removed (an ended flight with a
    plan rest left projects more than it delivered)."""
    got = projected_final(delivered, planned, plan_total, goal, ratio, ended=ended)
    assert 0 <= got <= goal
    assert got >= min(delivered, goal)
    if ended:
        assert got == min(delivered, goal)


@settings(max_examples=200, deadline=None)
@given(goal=st.integers(min_value=1, max_value=10**7), delivered=counts, planned=counts,
       recent_delivered=counts, recent_planned=counts)
def test_an_ended_flight_projects_what_it_delivered(goal: int, delivered: int, planned: int,
                                                     recent_delivered: int,
                                                     recent_planned: int) -> None:
    """Mutation that turns it red: ``line_progress`` passing ``ended=False`` on."""
    p = line_progress("impressions", delivered, planned, goal, goal, recent_delivered,
                      recent_planned, ended=True)
    assert p.projected_final == p.delivered == min(delivered, goal)
    assert p.state == ("met" if delivered >= goal else "missed")


def test_the_rest_of_the_plan_is_scaled_by_the_recent_ratio() -> None:
    """Worked example: goal 1,000 over the flight, 300 planned to date, 240 delivered;
    the last two days planned 200 and delivered 150 (ratio 0.75): projected
    240 + 700 × 0.75 = 765. Mutation that turns it red: the rest taken as goal −
    delivered (820 × 0.75 → 855), or the ratio of the whole flight (0.8 → 800)."""
    p = line_progress("impressions", 240, 300, 1000, 1000, 150, 200, ended=False)
    assert p.recent_ratio == 0.75
    assert p.projected_final == 765
    assert p.pace == pytest.approx(0.8) and p.state == "behind"


def test_the_recent_ratio_falls_back_to_the_flight_then_to_the_plan() -> None:
    """Mutation that turns it red: dividing by a recent plan of 0 events (a
    ZeroDivisionError), or a fallback of 0 (a fresh line projecting nothing)."""
    assert recent_ratio(30, 60, 90, 100) == 0.5
    assert recent_ratio(5, 0, 90, 100) == 0.9  # the plan gave the recent days nothing
    assert recent_ratio(0, 0, 0, 0) == 1.0  # nothing planned yet: the plan as it stands
    fresh = line_progress("clicks", 0, 0, 500, 500, 0, 0, ended=False)
    assert (fresh.projected_final, fresh.pace, fresh.state) == (500, None, "not_started")


def test_the_state_thresholds() -> None:
    """On track within ±5 % of the plan. Mutation that turns it red: a band of 10 %, or
    ahead and behind swapped."""
    assert PACE_BAND == 0.05
    assert progress_state(95, 100, 1000, ended=False) == "on_track"
    assert progress_state(105, 100, 1000, ended=False) == "on_track"
    assert progress_state(94, 100, 1000, ended=False) == "behind"
    assert progress_state(106, 100, 1000, ended=False) == "ahead"
    assert progress_state(0, 0, 1000, ended=False) == "not_started"


def test_goal_events_of_the_plans_money() -> None:
    """The whole goal cost converts back to exactly the goal (the cost is floored: 7
    impressions at a CPM of 0.333333 cost 2,333 micros, which buy 6.999 at the bid);
    a flight budget below it plans fewer. Mutation that turns it red: converting at
    the bid (``micros × 1000 // bid``: 6 of 7)."""
    cost = 7 * 333_333 // 1000
    assert cost == 2_333 and cost * 1000 // 333_333 == 6
    assert events_of_micros(cost, 7, cost) == 7
    cost = 2_000_000 * 5_000_000 // 1000
    assert events_of_micros(cost, 2_000_000, cost) == 2_000_000
    assert events_of_micros(cost // 2, 2_000_000, cost) == 1_000_000
    assert events_of_micros(1, 2_000_000, cost) == 0
    assert events_of_micros(5, 10, 0) == 0


@settings(max_examples=60, deadline=None)
@given(at_h=st.floats(min_value=-5, max_value=24 * 7 + 5), anchor=st.integers(0, 100),
       spent=st.integers(0, 10**8), frontloaded=st.booleans())
def test_the_plans_days_add_up_to_its_target(at_h: float, anchor: int, spent: int,
                                             frontloaded: bool) -> None:
    """``day_planned`` over every local day = ``target − anchor_spent``, and nothing for
    a day outside the flight or before the anchor. Mutation that turns it red:
    ``day_planned`` ignoring how much of the hour is done (whole hours), or not masking
    to the day."""
    hours = flight_hours(date(2026, 3, 2), date(2026, 3, 8), "Europe/Paris", SHAPE)
    plan = FlightPlan(hours, 10**9, anchor, spent, frontloaded)
    now = datetime(2026, 3, 2, tzinfo=UTC).timestamp() + at_h * 3600
    days = range(date(2026, 3, 1).toordinal(), date(2026, 3, 10).toordinal())
    per_day = [plan.day_planned(now, d) for d in days]
    assert math.isclose(sum(per_day), plan.target(now) - spent, rel_tol=1e-9, abs_tol=1e-3)
    assert per_day[0] == 0.0 and per_day[-1] == 0.0  # 1 and 9 March: outside the flight
    first_anchor_day = int(hours.day[min(anchor, len(hours) - 1)])
    assert all(v == 0.0 for d, v in zip(days, per_day, strict=True) if d < first_anchor_day)


def test_a_ratio_of_a_few_events_does_not_scale_the_plan() -> None:
    """Ten minutes into a flight (1 event planned, none billed yet) the projection is the
    plan as it stands, not 0 of the goal; with enough planned events the ratio counts.
    Mutation seen red: MIN_RATIO_EVENTS back at 1."""
    from adfunnel.pacing.progress import MIN_RATIO_EVENTS, recent_ratio

    assert recent_ratio(0, 1, 0, 1) == 1.0
    assert recent_ratio(0, MIN_RATIO_EVENTS, 0, MIN_RATIO_EVENTS) == 0.0
    assert recent_ratio(3, 5, 30, MIN_RATIO_EVENTS + 20) == 30 / (MIN_RATIO_EVENTS + 20)
