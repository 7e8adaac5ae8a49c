"""The limits a campaign's budget period puts on billing: pure, no I/O.

DESIGN.md §How ads are sold, *Budget periods*; CONTRACT25. Nothing above any limit is
billed; the part of a charge above the tightest one is absorbed (recorded as absorbed
overspend), so billed + absorbed == charge always. The limits of one write:

- the day: ``LedgerWrite.daily_budget_micros`` — the daily budget (period ``day``), 2×
  it (``average_day``), the daily ceiling or none (``flight``; :data:`NO_DAY_CAP`);
- the lifetime: ``LedgerWrite.lifetime_budget_micros`` — the lifetime budget, and for a
  flight its money limit as well (``flight_budget_micros``, or the goal's cost:
  impressions N × bid / 1000, clicks N × bid): a flight campaign's billing over all its
  days is its flight's (it serves only in its flight);
- the calendar month (``average_day``): :attr:`PeriodLimits.month_budget_micros`, 30.4×
  the average (``daily × 304 // 10``), over the local month of the event's day;
- the goal (guaranteed lines): :attr:`PeriodLimits.goal_total` events of type
  ``goal_event`` over the flight days; an event past it bills nothing (absorbed whole,
  counted as over-delivery) even where rounding left money under the goal's cost.

:func:`ledger_write` builds the write of an event of a campaign; a ``day`` campaign's
write is the one billing made before budget periods existed (no :class:`PeriodLimits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Protocol

from adfunnel.billing.model import EventType
from adfunnel.campaigns.model import BudgetPeriod, Campaign, GoalMetric
from adfunnel.pacing.flight import NO_DAY_CAP, day_limit, flight_money, period_budgets

#: Durable counter of the events billed nothing because their goal was met.
GOAL_OVER_DELIVERY = "goal_over_delivery"
__all__ = ["GOAL_OVER_DELIVERY", "NO_DAY_CAP", "PeriodLimits", "PeriodView", "day_limit",
           "flight_money", "month_of", "period_limits", "split_period", "write_budgets"]
#: average_day: a month at most 30.4× the average (Google Ads).
MONTH_NUM, MONTH_DEN = 304, 10


@dataclass(frozen=True, slots=True)
class PeriodLimits:
    """The limits beyond day and lifetime of one write (see the module docstring).

    ``month_budget_micros``: the most the local calendar month of the event's day bills
    (None: no month limit). ``goal_event``/``goal_total``: at most ``goal_total`` events
    of that type bill over the local days ``flight_first``..``flight_last``.
    """

    month_budget_micros: int | None = None
    goal_event: EventType | None = None
    goal_total: int | None = None
    flight_first: date | None = None
    flight_last: date | None = None

    def counts_goal(self, event_type: EventType, day: date) -> bool:
        """True when an event of ``event_type`` on local ``day`` counts toward the goal."""
        return (self.goal_event is not None and event_type == self.goal_event
                and (self.flight_first is None or self.flight_first <= day)
                and (self.flight_last is None or day <= self.flight_last))


class PeriodView(Protocol):
    """The period totals a ledger reads for a batch (as they were before it)."""

    def month_billed(self, campaign_id: int, first: date, last: date) -> int:
        """Billed micros of the campaign on local days ``first``..``last``."""
        ...

    def goal_events(self, campaign_id: int, event_type: EventType, first: date | None,
                    last: date | None) -> int:
        """Recorded (billed or absorbed) events of ``event_type`` of the campaign on
        local days ``first``..``last`` (None: unbounded)."""
        ...


def month_of(day: date) -> tuple[date, date]:
    """First and last date of ``day``'s calendar month."""
    first = day.replace(day=1)
    nxt = date(first.year + (first.month == 12), first.month % 12 + 1, 1)
    return first, date.fromordinal(nxt.toordinal() - 1)


def period_limits(campaign: Campaign) -> PeriodLimits | None:
    """The month and goal limits of ``campaign`` (None: it has neither)."""
    month = None
    if campaign.budget_period is BudgetPeriod.AVERAGE_DAY:
        month = campaign.daily_budget_micros * MONTH_NUM // MONTH_DEN
    goal = campaign.goal
    event = None
    if goal is not None and goal.total is not None:
        if goal.metric is GoalMetric.IMPRESSIONS:
            event = EventType.IMPRESSION
        elif goal.metric is GoalMetric.CLICKS:
            event = EventType.CLICK
    if month is None and event is None:
        return None
    return PeriodLimits(month, event, None if event is None else goal.total,  # type: ignore[union-attr]
                        campaign.flight_start, campaign.flight_end)


def split_period(charge: int, remaining: int, limits: PeriodLimits, event_type: EventType,
                 day: date, month_billed: int, goal_count: int) -> tuple[int, bool]:
    """The room left for ``charge`` under ``limits`` given ``remaining`` (day and
    lifetime), micros, and whether the event is past its goal (over-delivery).

    ``month_billed``: billed in the event's month so far; ``goal_count``: goal events
    recorded before this one. Invariant: the result is ≤ ``remaining``, ≤ what the month
    leaves, and 0 past the goal."""
    room = remaining
    if limits.month_budget_micros is not None:
        room = min(room, max(0, limits.month_budget_micros - month_billed))
    over = (limits.goal_total is not None and limits.counts_goal(event_type, day)
            and goal_count >= limits.goal_total)
    return (0 if over else min(room, charge)), over


def write_budgets(campaign: Campaign) -> tuple[int, int | None, PeriodLimits | None]:
    """(daily, lifetime, period limits) of a write for ``campaign``: a ``day`` campaign
    without a goal keeps (daily budget, lifetime budget, None) as before periods."""
    daily, lifetime = period_budgets(campaign)
    return daily, lifetime, period_limits(campaign)

