"""A direct line whose goal is met stays completed: neither ``:resume`` nor a PATCH of
its status makes it (completed or paused) active again until its goal is raised
(:func:`refuse_resuming_a_met_goal`), and a PATCH that lowers an active line's goal to
what it delivered completes it (:func:`completes_a_met_goal`).
Served again, each impression it took would be over-delivery that bills nothing: free
slots taken ahead of the auction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from adfunnel.billing.ledger import Ledger
from adfunnel.billing.period_report import goal_met
from adfunnel.campaigns.model import Campaign, CampaignStatus, Goal, GoalMetric
from adfunnel.campaigns.schedule import local_day
from adfunnel.clock import Clock
from adfunnel.http_errors import ApiError


def with_patched_goal(current: Campaign, changes: dict[str, Any]) -> Campaign:
    """``current`` with the impressions or clicks goal a PATCH's ``changes`` give it
    (``current`` itself when they set none, or one the store will refuse)."""
    goal = changes.get("goal")
    if not isinstance(goal, dict):
        return current
    total = goal.get("total")
    if goal.get("metric") not in ("impressions", "clicks") or type(total) is not int:
        return current
    return replace(current, goal=Goal(GoalMetric(goal["metric"]), total=total))


def refuse_resuming_a_met_goal(ledger: Ledger, clock: Clock, current: Campaign,
                               to: object) -> None:
    """Nothing when making ``current`` (a line as it would be) ``to`` is allowed.

    Raises:
        ApiError: 409 naming ``status`` when ``to`` is active, ``current`` is completed
            or paused and the ledger's goal events over its flight reach its goal's
            total.
    """
    if (to is CampaignStatus.ACTIVE
            and current.status in (CampaignStatus.COMPLETED, CampaignStatus.PAUSED)
            and goal_met(ledger, current, local_day(clock.now(), current.time_zone))):
        raise ApiError(409, "conflict", f"campaign {current.id} has met its goal",
                       fields=[("status", "the goal is met: raise goal.total to resume")])


def completes_a_met_goal(ledger: Ledger, clock: Clock, patched: Campaign,
                         changes: dict[str, Any]) -> None:
    """Make a PATCH that leaves an active line's goal met (lowered to what it delivered)
    complete the line in the same write: ``changes["status"]`` set to completed.
    Left active, it kept its slots ahead of the auction and every one was over-delivery
    billed nothing, until billing saw the first and completed it (a tester got 2 free
    impressions at once, more under beacon lag)."""
    status = changes.get("status", patched.status)
    if ("goal" in changes and status is CampaignStatus.ACTIVE
            and goal_met(ledger, patched, local_day(clock.now(), patched.time_zone))):
        changes["status"] = CampaignStatus.COMPLETED
