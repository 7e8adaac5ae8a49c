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

from dataclasses import replace
from datetime import date
from typing import Any, Protocol

from adfunnel.billing.limits import MONTH_DEN, MONTH_NUM, month_of
from adfunnel.billing.model import DayTotals
from adfunnel.campaigns.model import BudgetPeriod, Campaign, Goal, GoalMetric
from adfunnel.campaigns.sales import goal_cost
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


def goal_met(ledger: DayTotalsReader, campaign: Campaign, today: date) -> bool:
    """Whether ``campaign``'s impressions or clicks goal is met (the ledger's goal events
    over its flight reach the total); False without such a goal."""
    return period_report(ledger, campaign, today)["goal_shortfall"] == 0


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


def start_after_delivery(ledger: DayTotalsReader, campaign: Campaign,
                         start: date) -> str | None:
    """Why ``campaign``'s ``flight_start`` may not move later to ``start``: it delivered
    (billed) on days before it, which would then fall out of the flight whose budget and
    goal count them — its goal would count from zero again and bill past it. Judged for
    every campaign, whatever its period now: a write may change the period too, and a
    start moved past today would reopen its time zone (:func:`zone_after_start`). None
    when it may (an earlier start, or nothing delivered before)."""
    if start <= campaign.flight_start:
        return None
    delivered = _delivered_days(ledger, campaign.id, campaign.flight_start,
                                date.fromordinal(start.toordinal() - 1))
    if not delivered:
        return None
    return (f"is after {min(delivered).isoformat()}, when the line already delivered and "
            "billed: its flight budget and goal count those days (move the end instead)")


def metric_after_billing(ledger: DayTotalsReader, campaign: Campaign, metric: object,
                         today: date) -> str | None:
    """Why a line's goal may not change its metric to ``metric``: the line has billed,
    and its goal's money and count (the total x the rate, the events counted) would be
    judged afresh in the new unit, forgetting what it billed (a tester switched a line
    to clicks and back to dodge :func:`rate_leaves_goal_short`). None when it may."""
    goal = campaign.goal
    if goal is None or metric is None or metric == goal.metric.value:
        return None
    if not period_report(ledger, campaign, today)["billed_micros"]:
        return None
    return (f"is fixed once the line has billed: {goal.metric.value} (book a new line "
            "for another)")


def end_before_delivery(ledger: DayTotalsReader, campaign: Campaign,
                        end: date) -> str | None:
    """Why ``campaign``'s ``flight_end`` may not move earlier to ``end``: it delivered
    (billed) on days after it, which would then fall out of the flight whose budget and
    goal count them — its goal could be lowered below what it billed and, the end moved
    back, bill past it. Judged for every campaign, whatever its period now (a write may
    make it a flight). None when it may (a later end, or nothing delivered after)."""
    held = campaign.flight_end
    if held is not None and end >= held:
        return None
    delivered = _delivered_days(ledger, campaign.id, date.fromordinal(end.toordinal() + 1),
                                date.max)
    if not delivered:
        return None
    return (f"is before {max(delivered).isoformat()}, when the line already delivered and "
            "billed: its flight budget and goal count those days")


def rate_leaves_goal_short(ledger: DayTotalsReader, current: Campaign, after: Campaign,
                           today: date) -> str | None:
    """Why a guaranteed line's contract rate may not fall from ``current``'s to
    ``after``'s (``after``: the line as the write leaves its rate, goal total and
    budgets): its flight's money at the new terms (:func:`flight_money`; the goal costs
    its total x the rate) less what it already billed at the old rate would not pay for
    the rest of its goal at the new rate, so the line would stop short of the goal it
    was sold. None when it may (a raise, no goal, nothing billed, or money enough)."""
    goal = after.goal
    if (goal is None or goal.metric is GoalMetric.SHARE or goal.total is None
            or after.bid_micros >= current.bid_micros):
        return None
    rep = period_report(ledger, current, today)
    billed, delivered = int(rep["billed_micros"]), int(rep["goal_delivered"] or 0)
    if billed == 0:
        return None
    left = (flight_money(after) or 0) - billed
    remaining = max(0, goal.total - delivered)
    owed = goal_cost(goal.metric.value, remaining, after.bid_micros) or 0
    if left >= owed:
        return None
    return (f"leaves {max(0, left)} micros of the goal's money (its total x the rate) "
            f"after the {billed} already billed at the old rate, short of the {owed} its "
            f"{remaining} remaining {goal.metric.value} cost at this rate: the line would "
            "stop short of its goal (a goal's money is total x rate whatever the total, so "
            "book a new line at the new rate for what is left)")


def zone_after_start(campaign: Campaign, time_zone: object, today: date) -> str | None:
    """Why ``campaign``'s time zone may not become ``time_zone``: its flight has started
    (``today``, its local day, is on or after ``flight_start``), and its budget days,
    slices, ledger days and reports are kept in its zone. Changed then, the budget
    service kept the old zone's day while the gate asked for the new one's (no slice:
    the campaign went dark until the old zone's midnight), and the hours already billed
    on one local day fell on another's fresh budget. None when it may."""
    if time_zone == campaign.time_zone or today < campaign.flight_start:
        return None
    return (f"is fixed once the flight has started ({campaign.flight_start.isoformat()}): "
            f"its budget days, billing and reports are kept in {campaign.time_zone} "
            "(create a new campaign for another zone)")


def period_edit_problems(ledger: DayTotalsReader, current: Campaign,
                         changes: dict[str, Any], today: date) -> list[tuple[str, str]]:
    """``(field, problem)`` of a write that would forget what the line delivered: a goal
    lowered below it (:func:`goal_below_delivered`), a goal's metric changed after it
    billed (:func:`metric_after_billing`), a flight start or end moved past it
    (:func:`start_after_delivery`, :func:`end_before_delivery`), a contract rate lowered
    past what its goal's money still pays for (:func:`rate_leaves_goal_short`), a time
    zone changed after the flight started (:func:`zone_after_start`)."""
    out = []
    goal = changes.get("goal")
    if isinstance(goal, dict) and goal.get("total") is not None:
        problem = goal_below_delivered(ledger, current, str(goal.get("metric")),
                                       int(goal["total"]), today)
        if problem is not None:
            out.append(("goal.total", problem))
    if isinstance(goal, dict) and current.goal is not None:
        problem = metric_after_billing(ledger, current, goal.get("metric"), today)
        if problem is not None:
            out.append(("goal.metric", problem))
    after = _terms_after(current, changes)
    if after is not None:
        problem = rate_leaves_goal_short(ledger, current, after, today)
        if problem is not None:
            out.append(("bid_micros", problem))
    if "time_zone" in changes:
        problem = zone_after_start(current, changes["time_zone"], today)
        if problem is not None:
            out.append(("time_zone", problem))
    start = changes.get("flight_start")
    if isinstance(start, date):
        problem = start_after_delivery(ledger, current, start)
        if problem is not None:
            out.append(("flight_start", problem))
    end = changes.get("flight_end")
    if isinstance(end, date):
        problem = end_before_delivery(ledger, current, end)
        if problem is not None:
            out.append(("flight_end", problem))
    return out


def _terms_after(current: Campaign, changes: dict[str, Any]) -> Campaign | None:
    """``current`` with the rate, goal total and budgets a write's ``changes`` give it;
    None when the write leaves its rate alone or sets a goal the store will refuse."""
    bid, goal = changes.get("bid_micros"), current.goal
    if type(bid) is not int or goal is None:
        return None
    new_goal = changes.get("goal", {})
    metric = goal.metric.value
    if isinstance(new_goal, dict) and new_goal.get("metric", metric) != metric:
        return None  # another metric: another goal, judged as such
    total = new_goal.get("total", goal.total) if isinstance(new_goal, dict) else goal.total
    if total is not None and type(total) is not int:
        return None
    budgets = {k: changes[k] for k in ("flight_budget_micros", "lifetime_budget_micros")
               if k in changes and (changes[k] is None or type(changes[k]) is int)}
    return replace(current, bid_micros=bid, goal=Goal(goal.metric, total=total), **budgets)


def _delivered_days(ledger: DayTotalsReader, campaign_id: int, first: date,
                    last: date) -> list[date]:
    """The local days ``first``..``last`` on which the campaign delivered or billed."""
    return [r.day for r in ledger.day_totals(campaign_id, first, last)
            if r.impressions or r.clicks or r.conversions or r.billed_micros]
