"""What a campaign's budget period has billed: the figures of its period and goal.

DESIGN.md §How ads are sold, *Budget periods*. Read from the ledger's day totals (no
new table): the period's span is the flight (``flight``), the local calendar month of
``today`` (``average_day``) or ``today`` (``day``); ``budget_micros`` the period's money
limit (the flight's money: flight budget, goal cost, lifetime budget; 30.4× the average
for a month; the daily budget), ``billed_micros`` and ``absorbed_micros`` what the span
billed and absorbed. A guaranteed line's goal: ``goal_delivered`` goal events counted
up to the goal, ``over_delivery`` those beyond it (recorded, absorbed, never billed),
``goal_shortfall`` what is still missing.
"""

from __future__ import annotations

from datetime import date
from typing import Any, Protocol

from adfunnel.billing.limits import MONTH_DEN, MONTH_NUM, month_of
from adfunnel.billing.model import DayTotals
from adfunnel.campaigns.model import BudgetPeriod, Campaign, GoalMetric
from adfunnel.pacing.flight import flight_money


class DayTotalsReader(Protocol):
    def day_totals(self, campaign_id: int, first: date, last: date) -> list[DayTotals]: ...


def period_span(campaign: Campaign, today: date) -> tuple[date, date]:
    """The local days of the period that holds ``today``."""
    if campaign.budget_period is BudgetPeriod.FLIGHT:
        return campaign.flight_start, campaign.flight_end or today
    if campaign.budget_period is BudgetPeriod.AVERAGE_DAY:
        return month_of(today)
    return today, today


def period_budget(campaign: Campaign) -> int | None:
    """The period's money limit, micros (None: none)."""
    if campaign.budget_period is BudgetPeriod.FLIGHT:
        return flight_money(campaign)
    if campaign.budget_period is BudgetPeriod.AVERAGE_DAY:
        return campaign.daily_budget_micros * MONTH_NUM // MONTH_DEN
    return campaign.daily_budget_micros


def period_report(ledger: DayTotalsReader, campaign: Campaign, today: date) -> dict[str, Any]:
    """The period's figures as JSON-able fields (module docstring)."""
    first, last = period_span(campaign, today)
    rows = ledger.day_totals(campaign.id, first, last)
    billed = sum(r.billed_micros for r in rows)
    budget = period_budget(campaign)
    out: dict[str, Any] = {
        "budget_period": campaign.budget_period.value, "from": first, "to": last,
        "budget_micros": budget, "billed_micros": billed,
        "absorbed_micros": sum(r.absorbed_micros for r in rows),
        "remaining_micros": None if budget is None else max(0, budget - billed),
        "goal_total": None, "goal_delivered": None, "over_delivery": None,
        "goal_shortfall": None,
    }
    goal = campaign.goal
    if goal is not None and goal.total is not None and goal.metric is not GoalMetric.SHARE:
        events = sum(r.impressions if goal.metric is GoalMetric.IMPRESSIONS else r.clicks
                     for r in rows)
        out.update(goal_total=goal.total, goal_delivered=min(events, goal.total),
                   over_delivery=max(0, events - goal.total),
                   goal_shortfall=max(0, goal.total - events))
    return out


def goal_below_delivered(ledger: DayTotalsReader, campaign: Campaign, metric: str,
                         total: int, today: date) -> str | None:
    """Why ``campaign``'s goal may not become ``total`` ``metric`` events (its goal's
    metric unchanged): it already delivered more (the ledger, over its period to
    ``today``), and they were billed — nothing beyond a goal is billed, so a goal is
    never lowered below what it has delivered. None when it may."""
    goal = campaign.goal
    if goal is None or goal.metric is GoalMetric.SHARE or goal.metric.value != metric:
        return None
    rep = period_report(ledger, campaign, today)
    events = int(rep["goal_delivered"] or 0) + int(rep["over_delivery"] or 0)
    if total < events:
        return f"is below the {events} {metric} already delivered and billed"
    return None
