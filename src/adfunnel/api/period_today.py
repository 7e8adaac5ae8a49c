"""Today's figures of a campaign's budget period, as the budget service holds them: the
campaign report's ``period.today`` (``GET /v1/campaigns/{id}/report``).

For a ``flight`` or ``average_day`` campaign the budget service re-plans each local day's
budget (:mod:`adfunnel.budget.periods`); its owner reads here what the service gives the
current local day: ``day`` (ISO, the campaign's zone), ``allotment_micros`` (the day's
budget), and for a flight ``planned_micros`` (the plan's cumulative target now),
``spent_micros`` (the flight's spend so far, billed and in flight; null for an average
day) and ``planned_days`` (what the plan gives yesterday and today up to now, micros:
a guaranteed line's recent delivery ratio, :mod:`adfunnel.api.period_progress`). The
read is the dashboard's (:mod:`adfunnel.ui.budget_reads`: the embedded service under its
lock, or a fleet's shard over ``GET /v1/days``). Null for a ``day`` campaign,
without a budget service (the ``local`` gate), when the service does not hold the
campaign (not live, no servable ad yet) or a shard does not answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from adfunnel.campaigns.model import BudgetPeriod, Campaign


class DayReads(Protocol):
    """What :func:`period_today` reads (``adfunnel.ui.budget_reads.BudgetReads``)."""

    async def days(self, campaign_ids: Sequence[int]) -> dict[int, dict[str, Any]]: ...


async def period_today(reads: DayReads | None, campaign: Campaign) -> dict[str, Any] | None:
    """The campaign's ``period.today`` (module docstring), or None."""
    if reads is None or campaign.budget_period is BudgetPeriod.DAY:
        return None
    found = (await reads.days([campaign.id])).get(campaign.id)
    period = None if found is None else found.get("period")
    if found is None or period is None:
        return None
    return {"day": found["day"], "allotment_micros": int(period["allotment_micros"]),
            "planned_micros": period.get("planned_micros"),
            "spent_micros": period.get("spent_micros"),
            "planned_days": period.get("planned_days")}
