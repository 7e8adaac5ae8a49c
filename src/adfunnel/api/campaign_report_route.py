"""The route of one campaign's ledger report, ``GET /v1/campaigns/{id}/report``: the
figures of :mod:`adfunnel.api.campaign_report`, the budget period's (its ``today`` from
the budget service, :mod:`adfunnel.api.period_today`, and a guaranteed line's
``progress``, :mod:`adfunnel.api.period_progress`), in the server's currency.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from adfunnel.api import access
from adfunnel.api.campaign_report import measured_by_day, report, rollup_days
from adfunnel.api.field_types import LocalDate
from adfunnel.api.period_progress import RecentDelivery, period_progress, recent_delivery
from adfunnel.api.period_today import DayReads, period_today
from adfunnel.api.report_schemas import PeriodProgressOut, PeriodTodayOut, ReportOut
from adfunnel.auth.http import Caller
from adfunnel.auth.keys import Principal
from adfunnel.billing.ledger import Ledger
from adfunnel.billing.period_report import period_report
from adfunnel.billing.rollup_store import RollupStore
from adfunnel.campaigns.model import Campaign
from adfunnel.campaigns.schedule import local_day
from adfunnel.campaigns.store import CampaignStore
from adfunnel.clock import Clock
from adfunnel.http_errors import validation_error


def add_report_route(router: APIRouter, store: CampaignStore, ledger: Ledger, clock: Clock,
                     rollups: RollupStore | None, budget: DayReads | None, *,
                     max_days: int, currency: str) -> None:
    """Add the report route to ``router``: a caller who may read the campaign
    (:func:`adfunnel.api.access.campaign`; another advertiser's id answers 404); a
    span of at most ``max_days`` local days (422 naming ``to``), ``from`` on or before
    ``to`` (422 naming ``from``). ``rollups`` None: no invalid-traffic or measured
    figures; ``budget`` None: ``period.today`` null."""

    @router.get("/v1/campaigns/{campaign_id}/report", response_model=ReportOut)
    async def campaign_report(
        campaign_id: int,
        who: Caller,
        first: Annotated[LocalDate | None, Query(alias="from")] = None,
        last: Annotated[LocalDate | None, Query(alias="to")] = None,
    ) -> ReportOut:
        """Defaults: ``to`` = today in the campaign's zone, ``from`` = ``to``. The
        period's ``today``: the budget service's (:mod:`adfunnel.api.period_today`); its
        ``progress``: a guaranteed line's (:mod:`adfunnel.api.period_progress`)."""
        out, campaign, recent = await run_in_threadpool(ledger_report, campaign_id, who,
                                                        first, last)
        out.currency = currency
        if out.period is not None:
            today = await period_today(budget, campaign)
            out.period.today = None if today is None else PeriodTodayOut.model_validate(today)
            progress = period_progress(campaign, out.period.goal_delivered, today, recent)
            out.period.progress = (None if progress is None
                                   else PeriodProgressOut.model_validate(progress))
        return out

    def ledger_report(campaign_id: int, who: Principal, first: date | None, last: date | None
                      ) -> tuple[ReportOut, Campaign, RecentDelivery | None]:
        """The report from the store, ledger and rollups, and a guaranteed line's recent
        goal events (blocking: a worker thread)."""
        campaign = access.campaign(store, who, campaign_id)
        return (_ledger_report(campaign, first, last), campaign,
                recent_delivery(ledger, campaign, clock.now()))

    def _ledger_report(campaign: Campaign, first: date | None, last: date | None
                       ) -> ReportOut:
        campaign_id = campaign.id
        last = last or local_day(clock.now(), campaign.time_zone)
        first = first or last
        if first > last:
            raise validation_error(("from", "must be on or before to"))
        if last - first >= timedelta(days=max_days):
            raise validation_error(("to", f"a report spans at most {max_days} days"))
        period = period_report(ledger, campaign, last)  # flight, month, goal figures
        if rollups is None:
            return report(ledger, campaign_id, first, last, campaign.lifetime_budget_micros,
                          period=period)
        days = rollup_days(rollups, campaign_id, first, last, campaign.time_zone)
        ivt = {d: dict(r.ivt) for d, r in days.items() if r.ivt}
        return report(ledger, campaign_id, first, last, campaign.lifetime_budget_micros, ivt,
                      measured_by_day(days), period=period)
