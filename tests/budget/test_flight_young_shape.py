"""A flight whose campaign gets a traffic shape of its own from its first hours: the
budget process trusts a campaign's own shape once it has logged ``MIN_REQUESTS``
eligible requests, which a busy campaign reaches in its first hours. When the hours it
had not lived through yet read zero in that shape, a one-day guaranteed line given it
at 03:00 stopped for the rest of its day (its plan said the whole flight was due by
then, and the re-plan's 1.5x cap of a zero rate is zero): 68 of a goal of 600
delivered with 1,728 matching requests, every later request turned away as
``goal_met``. The log's shape now weighs unlived hours as the placement does
(``pacing.hour_means``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

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
from adfunnel.pacing.traffic_log import MIN_REQUESTS, shapes

from .flight_sim import FlightSim

DAY = date(2026, 11, 4)
T0 = datetime(2026, 11, 4, tzinfo=UTC)
#: a placement's older campaign (dense 09-22) and the new one's first three hours
OLD = {T0 - timedelta(days=1, hours=-h): (40 if 9 <= h % 24 < 22 else 4) for h in range(27)}
NEW = {T0 + timedelta(hours=h): MIN_REQUESTS for h in range(3)}
#: what a refresh at 03:00 gives the new campaign
FIRST_HOURS = np.array(shapes({1: NEW, 2: OLD}, {1: "UTC", 2: "UTC"},
                              T0 + timedelta(hours=3))[1])


def test_hours_a_young_shape_has_not_lived_weigh_as_the_placement() -> None:
    h = flight_hours(DAY, DAY, "UTC", FIRST_HOURS)
    assert (h.weight > 0).all()
    # scaled to the new one's level on 00-02, where it is 50x the placement's
    assert h.weight[10] == pytest.approx(10 * h.weight[0])


def test_a_lived_hour_without_traffic_stays_zero() -> None:
    shape = [0.0] * 3 + [1.0] * 21
    h = flight_hours(DAY, DAY, "UTC", shape)
    assert (h.weight[:3] == 0).all() and (h.weight[3:] > 0).all()


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
