"""The pure money rules of a ledger write (``billing.charges``, ``billing.limits``) at
their edges: a day or month already billed past a lowered budget, a charge at the int64
bound, a lifetime budget's checks, December's month, a goal's first day."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from adfunnel.billing.batch_model import LedgerWrite
from adfunnel.billing.charges import lifetime_left, split_charge, validate
from adfunnel.billing.limits import PeriodLimits, month_of, period_limits, split_period
from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.campaigns.model import (
    BidType,
    BudgetPeriod,
    Campaign,
    Goal,
    GoalMetric,
    Objective,
    Priority,
)
from adfunnel.money import MoneyError

DAY = date(2026, 3, 1)
INT64_MAX = 2**63 - 1


def _write(charge: int, *, per_mille: bool = False, daily: int = 10**6,
           life: object = None) -> LedgerWrite:
    e = LedgerEvent("p1", EventType.IMPRESSION, 7, 70, "feed", "CPM" if per_mille else "CPC",
                    charge, datetime(2026, 3, 1, 12, tzinfo=UTC), DAY,
                    charge_per_mille=per_mille)
    return LedgerWrite(e, daily, life)  # type: ignore[arg-type]


def test_a_day_or_lifetime_billed_past_its_budget_bills_nothing_more() -> None:
    # the daily budget was lowered to 500 after 900 were billed: all 100 absorbed
    assert split_charge(100, 900, 500) == (0, 100)
    assert split_charge(100, 0, 1_000, -5) == (0, 100)
    assert split_charge(100, 0, 1_000, 30) == (30, 70)
    assert lifetime_left(100, 150) == 0
    assert lifetime_left(None, 150) is None


def test_a_month_billed_past_its_limit_leaves_no_room() -> None:
    limits = PeriodLimits(month_budget_micros=1_000)
    assert split_period(100, 10**6, limits, EventType.CLICK, DAY, 1_200, 0) == (0, False)
    assert split_period(100, 10**6, limits, EventType.CLICK, DAY, 950, 0) == (50, False)


def test_charges_that_overflow_int64_are_refused() -> None:
    validate([_write(INT64_MAX // 1000)])  # 1000 × it still fits
    with pytest.raises(MoneyError):
        validate([_write(2**62)])  # a per-click charge counted in thousandths
    validate([_write(INT64_MAX, per_mille=True)])
    with pytest.raises(MoneyError):
        validate([_write(2**63, per_mille=True)])


@pytest.mark.parametrize("life", [-1, 1.5, True])
def test_a_bad_lifetime_budget_is_refused(life: object) -> None:
    with pytest.raises(MoneyError):
        validate([_write(100, life=life)])


def test_decembers_month_ends_on_the_31st() -> None:
    assert month_of(date(2026, 12, 15)) == (date(2026, 12, 1), date(2026, 12, 31))
    assert month_of(date(2028, 2, 29)) == (date(2028, 2, 1), date(2028, 2, 29))


def test_period_limits_month_rounds_down_and_goals_count_their_metric() -> None:
    avg = Campaign(7, 1, "a", Objective.CLICKS, BidType.CPC, 500_000, 1_000_001, "UTC", DAY,
                   budget_period=BudgetPeriod.AVERAGE_DAY)
    limits = period_limits(avg)
    assert limits is not None
    assert limits.month_budget_micros == 30_400_030  # 1_000_001 × 30.4 = 30_400_030.4
    clicks = Campaign(8, 1, "g", Objective.CLICKS, BidType.CPC, 1_000, 0, "UTC", DAY,
                      date(2026, 3, 3), priority=Priority.GUARANTEED,
                      goal=Goal(GoalMetric.CLICKS, total=10), budget_period=BudgetPeriod.FLIGHT)
    goal = period_limits(clicks)
    assert goal is not None and (goal.goal_event, goal.goal_total) == (EventType.CLICK, 10)
    # the flight's first and last days count; the days around them do not
    assert goal.counts_goal(EventType.CLICK, date(2026, 3, 1))
    assert goal.counts_goal(EventType.CLICK, date(2026, 3, 3))
    assert not goal.counts_goal(EventType.CLICK, date(2026, 2, 28))
    assert not goal.counts_goal(EventType.CLICK, date(2026, 3, 4))
    assert not goal.counts_goal(EventType.IMPRESSION, date(2026, 3, 2))
