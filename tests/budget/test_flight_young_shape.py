"""A flight whose campaign gets a traffic shape of its own from its first hours: the
budget process trusts a campaign's own shape once it has logged ``MIN_REQUESTS``
eligible requests, which a busy campaign reaches in its first hours; the hours it has
not lived through yet read zero in that shape. A flight plan made from it must not
take zero for "no traffic": a one-day guaranteed line given such a shape at 03:00
stopped for the rest of its day (its plan said the whole flight was due by then, and
the re-plan's 1.5x cap of a zero rate is zero): 68 of a goal of 600 delivered with
1,728 matching requests, every later request turned away as ``goal_met``."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import pytest

from adfunnel.campaigns.model import (
    BidType,
    BudgetPeriod,
    Campaign,
    Goal,
    GoalMetric,
    Objective,
    Priority,
)
from adfunnel.pacing.flight import flight_hours

from .flight_sim import FlightSim

DAY = date(2026, 11, 4)
#: what a refresh at 03:00 gives a campaign first seen at 00:00: its hours 0-2 only
FIRST_HOURS = np.array([1 / 3] * 3 + [0.0] * 21)


def test_hours_a_shape_has_not_seen_weigh_as_an_average_hour() -> None:
    h = flight_hours(DAY, DAY, "UTC", FIRST_HOURS)
    assert (h.weight[3:] > 0).all()
    assert h.weight[0] == pytest.approx(h.weight[10])


def test_a_shape_without_any_weight_is_still_flat() -> None:
    h = flight_hours(DAY, DAY, "UTC", [0.0] * 24)
    assert (h.weight[:23] == 1.0).all()


@pytest.mark.slow
def test_a_one_day_guaranteed_line_given_its_first_hours_shape_delivers_its_goal() -> None:
    goal = 300
    c = Campaign(1, 1, "g", Objective.IMPRESSIONS, BidType.CPM, 5_000_000, 0, "UTC", DAY, DAY,
                 priority=Priority.GUARANTEED, goal=Goal(GoalMetric.IMPRESSIONS, total=goal),
                 budget_period=BudgetPeriod.FLIGHT)
    sim = FlightSim(c, datetime(2026, 11, 4, tzinfo=UTC), per_hour=6.0)
    sim.hooks[datetime(2026, 11, 4, 3, tzinfo=UTC).timestamp()] = (
        lambda s: s.svc.set_traffic_shapes(np.array([1]), FIRST_HOURS[None, :]))
    run = sim.until(datetime(2026, 11, 5, 0, 30, tzinfo=UTC))
    delivered = run.total // 5_000
    assert 0.98 * goal <= delivered <= goal
