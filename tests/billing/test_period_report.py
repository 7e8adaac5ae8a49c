"""The budget period's figures of a campaign (adfunnel.billing.period_report): a goal's
over-delivery and shortfall, a flight's budget, billed and remaining, an average-day
month."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from adfunnel.billing.ledger import LedgerWrite, MemoryLedger
from adfunnel.billing.limits import write_budgets
from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.billing.period_report import period_report
from adfunnel.campaigns.model import (
    BidType,
    BudgetPeriod,
    Campaign,
    Goal,
    GoalMetric,
    Objective,
    Priority,
)

START = date(2026, 3, 1)


def _bill(ledger: MemoryLedger, c: Campaign, n: int, charge: int) -> None:
    daily, life, limits = write_budgets(c)
    for i in range(n):
        day = START + timedelta(days=i % 3)
        ev = LedgerEvent(f"i{c.id}-{i}", EventType.IMPRESSION, c.id, 1, "feed", "CPM", charge,
                         datetime(2026, 3, day.day, 12, tzinfo=UTC), day, charge_per_mille=True)
        ledger.record_many([LedgerWrite(ev, daily, life, period=limits)])


def test_a_goal_reports_its_over_delivery() -> None:
    ledger = MemoryLedger()
    c = Campaign(1, 1, "g", Objective.IMPRESSIONS, BidType.CPM, 2_000_000, 0, "UTC", START,
                 date(2026, 3, 3), priority=Priority.GUARANTEED,
                 goal=Goal(GoalMetric.IMPRESSIONS, total=100), budget_period=BudgetPeriod.FLIGHT)
    _bill(ledger, c, 104, 2_000_000)
    out = period_report(ledger, c, date(2026, 3, 3))
    assert out["budget_micros"] == out["billed_micros"] == 200_000
    assert out["absorbed_micros"] == 4 * 2_000
    assert (out["goal_delivered"], out["over_delivery"], out["goal_shortfall"]) == (100, 4, 0)
    assert out["remaining_micros"] == 0


def test_a_flight_and_a_month_report_their_span() -> None:
    ledger = MemoryLedger()
    f = Campaign(2, 1, "f", Objective.IMPRESSIONS, BidType.CPM, 2_000_000, 0, "UTC", START,
                 date(2026, 3, 9), budget_period=BudgetPeriod.FLIGHT,
                 flight_budget_micros=1_000_000)
    _bill(ledger, f, 30, 2_000_000)
    out = period_report(ledger, f, date(2026, 3, 3))
    assert (out["from"], out["to"]) == (START, date(2026, 3, 9))
    assert out["billed_micros"] == 60_000 and out["remaining_micros"] == 940_000
    assert out["goal_total"] is None
    a = Campaign(3, 1, "a", Objective.IMPRESSIONS, BidType.CPM, 2_000_000, 10_000, "UTC", START,
                 budget_period=BudgetPeriod.AVERAGE_DAY)
    out = period_report(ledger, a, date(2026, 3, 14))
    assert (out["from"], out["to"], out["budget_micros"]) == (START, date(2026, 3, 31), 304_000)
