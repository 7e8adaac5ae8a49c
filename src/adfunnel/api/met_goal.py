"""A direct line whose goal is met stays completed: neither ``:resume`` nor a PATCH of
its status makes it active again until its goal is raised (:func:`refuse_resuming_a_met_goal`).
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
            and the ledger's goal events over its flight reach its goal's total.
    """
    if (to is CampaignStatus.ACTIVE and current.status is CampaignStatus.COMPLETED
            and goal_met(ledger, current, local_day(clock.now(), current.time_zone))):
        raise ApiError(409, "conflict", f"campaign {current.id} has met its goal",
                       fields=[("status", "the goal is met: raise goal.total to resume")])
