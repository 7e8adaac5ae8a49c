"""A guaranteed line's progress against its flight plan: the campaign report's
``period.progress`` (``GET /v1/campaigns/{id}/report``), which the dashboard's campaign
page shows.

Figures in goal events (impressions or clicks, the goal's metric), from two sources:

- ``delivered``: the ledger's goal events over the flight to date, up to the goal (the
  period's ``goal_delivered``, :mod:`adfunnel.billing.period_report`); the recent days'
  events come from the ledger's day totals too (:func:`recent_delivery`);
- ``planned_to_date``: the budget service's own flight plan, its cumulative target now
  (``period.today.planned_micros``), and what it gave the recent days
  (``period.today.planned_days``), converted to goal events at the line's contract
  rate (:func:`adfunnel.pacing.progress.events_of_micros`). Before the flight it is 0;
  after it, the whole plan (neither needs the service).

The projection and the state follow :mod:`adfunnel.pacing.progress` (rule and limits
there). Null for a line that is not guaranteed (no impressions or clicks goal), and in
flight when the budget service does not answer (``period.today`` null).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from adfunnel.billing.period_report import DayTotalsReader
from adfunnel.campaigns.model import Campaign, GoalMetric, Priority
from adfunnel.campaigns.schedule import local_day
from adfunnel.pacing.flight import flight_money, goal_cost
from adfunnel.pacing.progress import RECENT_DAYS, events_of_micros, line_progress


@dataclass(frozen=True, slots=True)
class RecentDelivery:
    """The ledger's goal events per local day over the last :data:`RECENT_DAYS` days up
    to ``today`` (the campaign's local day now)."""

    today: date
    events: dict[date, int]


def is_line(campaign: Campaign) -> bool:
    """A guaranteed line with an impressions or clicks goal total."""
    goal = campaign.goal
    return (campaign.priority is Priority.GUARANTEED and goal is not None
            and goal.total is not None and goal.metric is not GoalMetric.SHARE)


def recent_delivery(ledger: DayTotalsReader, campaign: Campaign, now: datetime
                    ) -> RecentDelivery | None:
    """The recent goal events of a guaranteed line from the ledger (blocking: call it on
    a worker thread); None for another campaign."""
    if not is_line(campaign):
        return None
    assert campaign.goal is not None
    today = local_day(now, campaign.time_zone)
    rows = ledger.day_totals(campaign.id, today - timedelta(days=RECENT_DAYS - 1), today)
    clicks = campaign.goal.metric is GoalMetric.CLICKS
    return RecentDelivery(today, {r.day: r.clicks if clicks else r.impressions for r in rows})


def period_progress(campaign: Campaign, delivered: int | None,
                    today_view: dict[str, Any] | None, recent: RecentDelivery | None
                    ) -> dict[str, Any] | None:
    """The line's ``period.progress`` (module docstring) from the period's
    ``goal_delivered``, the budget service's ``period.today`` (:mod:`period_today`) and
    the ledger's recent days; None where it cannot be told."""
    if recent is None or delivered is None or not is_line(campaign):
        return None
    goal = campaign.goal
    assert goal is not None and goal.total is not None
    cost, money = goal_cost(campaign), flight_money(campaign)
    if cost is None or money is None:
        return None

    def events(micros: int) -> int:
        return events_of_micros(micros, goal.total, cost)

    plan_total = min(goal.total, events(money))
    ended = campaign.flight_end is not None and recent.today > campaign.flight_end
    recent_done, recent_planned = 0, 0
    if recent.today < campaign.flight_start:
        planned = 0
    elif ended:
        planned = plan_total
    else:
        if today_view is None or today_view.get("planned_micros") is None:
            return None
        planned = min(plan_total, events(int(today_view["planned_micros"])))
        days = today_view.get("planned_days") or []
        recent_planned = events(sum(int(d["planned_micros"]) for d in days))
        recent_done = sum(recent.events.get(date.fromisoformat(str(d["day"])), 0)
                          for d in days)
    return line_progress(goal.metric.value, delivered, planned, plan_total, goal.total,
                         recent_done, recent_planned, ended=ended).as_dict()
