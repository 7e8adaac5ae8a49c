"""The operator's placement report: what one placement sold, across advertisers.

Route (admin only)::

    GET /v1/placements/{id}/report?from=&to=&granularity=day|hour&time_zone=

Answers ``{"placement", "from", "to", "time_zone", "granularity", "currency", "requests",
"slots_requested", "filled_slots", "fill_rate", "impressions", "revenue_micros",
"ecpm_micros", "by_tier": {"sponsorship" | "guaranteed" | "auction" | "house": {…}},
"days": [{"day", …}]}``; with ``granularity=hour`` the periods are ``"hours": [{"hour",
…}]`` (the local hour's start with its offset) instead of ``days``. Every period of the
span is listed, zeros included, each with its own ``by_tier``. The figures and their
rules: :mod:`adfunnel.api.placement_figures`; requests and filled slots are counted on
the serving path (:mod:`adfunnel.serving.placement_traffic`), impressions and revenue
are the ledger's (its rollups, refreshed every ``rollup_refresh_s``), in the tier of the
campaign's priority when the report is read (a campaign moved to another tier counts
its whole history there).

- ``from``, ``to``: local dates in ``time_zone`` (IANA, default ``UTC``), both included;
  default today there, ``from`` = ``to``; at most 366 days (hourly: 31).
- ``currency``: the server's (setting ``currency``); money is integer micros of it.

Errors: 422 naming the field (``from``, ``to``, ``granularity``, ``time_zone``); 404 for a
placement neither configured (``POST /v1/placements``) nor ever requested; 401/403 for a
caller who is not an admin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from adfunnel.api.pagination import known_query_only
from adfunnel.api.placement_figures import placement_figures
from adfunnel.api.report_schemas import PlacementReportOut
from adfunnel.api.reports import (
    DEFAULT_HOURLY_MAX_DAYS,
    DEFAULT_MAX_DAYS,
    From,
    GranularityQ,
    To,
    report_span,
)
from adfunnel.auth.http import require_role
from adfunnel.auth.keys import Role
from adfunnel.billing.rollup_store import RollupStore
from adfunnel.billing.rollups import local_days_span
from adfunnel.campaigns.errors import NotFound
from adfunnel.campaigns.model import Priority
from adfunnel.campaigns.schedule import is_valid_zone, local_day
from adfunnel.campaigns.store import CampaignStore
from adfunnel.clock import Clock
from adfunnel.http_errors import validation_error
from adfunnel.serving.placement_traffic import PlacementTraffic


def make_placement_report_router(
    store: CampaignStore, rollups: RollupStore, traffic: PlacementTraffic, clock: Clock,
    currency: str, *, max_days: int = DEFAULT_MAX_DAYS,
    max_hourly_days: int = DEFAULT_HOURLY_MAX_DAYS,
) -> APIRouter:
    """The placement report route over ``store`` (placements, campaigns' priorities),
    ``rollups`` (billed figures) and ``traffic`` (requests and fill); ``clock`` gives
    "today"; ``currency`` is named in every answer. The app must call
    :func:`adfunnel.api.errors.install_error_handlers`."""
    router = APIRouter(tags=["operator"], dependencies=[Depends(require_role(Role.ADMIN)),
                                                        Depends(known_query_only)])

    def tiers() -> Callable[[int], str]:
        """Campaign id -> its tier: its priority now (read once per report)."""
        known: dict[int, str] = {}

        def tier_of(campaign_id: int) -> str:
            tier = known.get(campaign_id)
            if tier is None:
                try:
                    tier = str(store.get_campaign(campaign_id).priority)
                except NotFound:  # billed, then gone from the store: the auction's
                    tier = str(Priority.AUCTION)
                known[campaign_id] = tier
            return tier

        return tier_of

    @router.get("/v1/placements/{placement_id}/report", response_model=PlacementReportOut)
    def placement_report(
        placement_id: str, first: From = None, last: To = None,
        granularity: GranularityQ = "day", time_zone: str = "UTC",
    ) -> Any:
        """Requests, fill, impressions, revenue and eCPM of one placement, in total, by
        tier and per local day or hour (module docstring)."""
        if not is_valid_zone(time_zone):
            raise validation_error(("time_zone", "must be an IANA time zone name"))
        first, last = report_span(
            first, last, local_day(clock.now(), time_zone), granularity,
            max_hourly_days if granularity == "hour" else max_days)
        start, end = local_days_span(first, last, time_zone)
        counted = traffic.quarters(placement_id, start, end)
        try:
            store.get_placement(placement_id)
        except NotFound:
            if not counted and not traffic.table.seen(placement_id):
                raise
        billed = rollups.hours(start=start, end=end, placement=placement_id)
        totals, periods = placement_figures(counted, billed, tiers(), start=start, end=end,
                                            granularity=granularity, time_zone=time_zone)
        key = "days" if granularity == "day" else "hours"
        out = PlacementReportOut.model_validate({
            "placement": placement_id, "from": first, "to": last, "time_zone": time_zone,
            "granularity": granularity, "currency": currency, **totals, key: periods})
        body = out.model_dump(mode="json", by_alias=True,
                              exclude={"hours" if key == "days" else "days"})
        return JSONResponse(body)

    return router
