"""Rollup reports of the advertiser API: per local hour or local day, per ad, campaign or
placement, read from the quarter-hour ledger rollups (:mod:`adfunnel.billing.rollups`), as JSON
or CSV.

Routes::

    GET /v1/campaigns/{id}/report/rollups?from=&to=&granularity=&group_by=
    GET /v1/advertisers/{id}/report/rollups?from=&to=&granularity=&group_by=&time_zone=
    GET /v1/placements/{id}/report/rollups?from=&to=&granularity=&group_by=&time_zone=  (admin)

- ``from``, ``to``: local dates ``YYYY-MM-DD``, both included, in the campaign's time
  zone (advertiser: ``time_zone``, an IANA name, default ``UTC``); default: today there,
  and ``from`` = ``to``. Every event counts in its own local day and hour, in every zone
  (:30 and :45 offsets and DST included), as in ``GET /v1/campaigns/{id}/report``.
- ``granularity``: ``day`` (default; ``period_start`` is the local midnight) or ``hour``
  (``period_start`` is the start of the local hour; at most
  :data:`DEFAULT_HOURLY_MAX_DAYS` days). Every ``period_start`` carries the offset of
  the zone the response names (``time_zone``).
- ``group_by``: ``campaign`` (default), ``ad`` or ``placement`` (the placement report:
  ``placement`` by default — its rendered, viewable and viewability over every
  campaign; ``ad`` or ``campaign`` break it down).
- ``Accept: text/csv`` answers CSV (:func:`rollup_csv`): a header row, then one row per
  period and group.

Money in integer micros of the server's ``currency`` (named in every JSON answer, and
in a CSV's ``currency`` column); metrics null without their denominator. Every row has the
measured ``rendered`` and ``viewable`` events and ``viewability_rate`` = viewable /
rendered: with ``group_by=ad`` per ad, ``campaign`` per campaign, ``placement`` per
placement. A report shows the
rollups as last refreshed (the aggregator refreshes the hours of each batch it commits).

Errors (``adfunnel.http_errors``): 422 naming the field (``from``, ``to``,
``granularity``, ``group_by``, ``time_zone``), 404 for an unknown campaign or advertiser.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from datetime import date, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from adfunnel.api import access
from adfunnel.api.field_types import LocalDate
from adfunnel.api.pagination import known_query_only
from adfunnel.api.report_schemas import RollupReportOut, RollupRowOut, RollupTotalsOut
from adfunnel.auth.http import Caller, require_role
from adfunnel.auth.keys import Role
from adfunnel.billing.rollup_store import RollupStore
from adfunnel.billing.rollups import (
    GROUP_COLUMNS,
    Granularity,
    GroupBy,
    ReportRow,
    ivt_reasons,
    local_days_span,
    total,
)
from adfunnel.campaigns.schedule import is_valid_zone, local_day
from adfunnel.campaigns.store import CampaignStore
from adfunnel.clock import Clock
from adfunnel.http_errors import validation_error
from adfunnel.settings.model import DEFAULT_CURRENCY

#: Longest span of a daily rollup report, in days.
DEFAULT_MAX_DAYS = 366
#: Longest span of an hourly rollup report, in days.
DEFAULT_HOURLY_MAX_DAYS = 31

CSV_MEDIA_TYPE = "text/csv"
_METRICS = ("impressions", "clicks", "conversions", "billed_micros", "absorbed_micros",
            "ctr", "ecpm_micros", "cost_per_conversion_micros", "rendered", "viewable",
            "viewability_rate")

From = Annotated[LocalDate | None, Query(alias="from")]
To = Annotated[LocalDate | None, Query(alias="to")]
GranularityQ = Annotated[Granularity, Query()]
GroupByQ = Annotated[GroupBy, Query()]


def make_rollup_router(
    store: CampaignStore, rollups: RollupStore, clock: Clock, *,
    max_days: int = DEFAULT_MAX_DAYS, max_hourly_days: int = DEFAULT_HOURLY_MAX_DAYS,
    currency: str = DEFAULT_CURRENCY,
) -> APIRouter:
    """The rollup report routes over ``store`` (campaigns, advertisers, time zones) and
    ``rollups``; ``clock`` gives "today" for reports without dates; ``currency`` is named
    in every JSON answer. The app must call
    :func:`adfunnel.api.errors.install_error_handlers`."""
    router = APIRouter(tags=["advertiser"])
    csv_doc: dict[int | str, dict[str, Any]] = {
        200: {"content": {CSV_MEDIA_TYPE: {}}, "description": "JSON, or CSV on Accept: text/csv"}
    }

    def span(first: date | None, last: date | None, tz: str,
             granularity: Granularity) -> tuple[date, date]:
        return report_span(first, last, local_day(clock.now(), tz), granularity,
                           max_hourly_days if granularity == "hour" else max_days)

    @router.get("/v1/campaigns/{campaign_id}/report/rollups", response_model=RollupReportOut,
                responses=csv_doc)
    def campaign_rollups(
        campaign_id: int, request: Request, who: Caller, first: From = None, last: To = None,
        granularity: GranularityQ = "day", group_by: GroupByQ = "campaign",
    ) -> Any:
        """Rollups of one campaign, days local to its time zone."""
        tz = access.campaign(store, who, campaign_id).time_zone
        first, last = span(first, last, tz, granularity)
        start, end = local_days_span(first, last, tz)
        rows = rollups.query(start=start, end=end, campaign_ids=[campaign_id],
                             granularity=granularity, group_by=group_by, time_zone=tz)
        head = {"campaign_id": campaign_id, "from": first, "to": last, "time_zone": tz,
                "granularity": granularity, "group_by": group_by, "currency": currency}
        return _answer(request, rows, head, f"campaign-{campaign_id}-rollups.csv")

    @router.get("/v1/advertisers/{advertiser_id}/report/rollups",
                response_model=RollupReportOut, responses=csv_doc)
    def advertiser_rollups(
        advertiser_id: int, request: Request, who: Caller, first: From = None,
        last: To = None,
        granularity: GranularityQ = "day", group_by: GroupByQ = "campaign",
        time_zone: str = "UTC",
    ) -> Any:
        """Rollups of every campaign of one advertiser, days local to ``time_zone``."""
        if not is_valid_zone(time_zone):
            raise validation_error(("time_zone", "must be an IANA time zone name"))
        access.advertiser(store, who, advertiser_id)  # 404: unknown, or not the caller's
        first, last = span(first, last, time_zone, granularity)
        start, end = local_days_span(first, last, time_zone)
        rows = rollups.query(start=start, end=end, advertiser_id=advertiser_id,
                             granularity=granularity, group_by=group_by, time_zone=time_zone)
        head = {"advertiser_id": advertiser_id, "from": first, "to": last,
                "time_zone": time_zone, "granularity": granularity, "group_by": group_by,
                "currency": currency}
        return _answer(request, rows, head, f"advertiser-{advertiser_id}-rollups.csv")

    return router


def make_placement_rollup_router(
    store: CampaignStore, rollups: RollupStore, clock: Clock, *,
    max_days: int = DEFAULT_MAX_DAYS, max_hourly_days: int = DEFAULT_HOURLY_MAX_DAYS,
    currency: str = DEFAULT_CURRENCY,
) -> APIRouter:
    """The operator's placement rollups (admin only): one placement's rollups over every
    campaign, days local to ``time_zone`` (default ``UTC``); 404 for an unknown
    placement. (The placement's requests, fill and revenue: :mod:`.placement_report`.)"""
    router = APIRouter(tags=["operator"], dependencies=[Depends(require_role(Role.ADMIN)),
                                                        Depends(known_query_only)])
    csv_doc: dict[int | str, dict[str, Any]] = {
        200: {"content": {CSV_MEDIA_TYPE: {}}, "description": "JSON, or CSV on Accept: text/csv"}
    }

    @router.get("/v1/placements/{placement_id}/report/rollups",
                response_model=RollupReportOut, responses=csv_doc)
    def placement_rollups(
        placement_id: str, request: Request, first: From = None, last: To = None,
        granularity: GranularityQ = "day", group_by: GroupByQ = "placement",
        time_zone: str = "UTC",
    ) -> Any:
        """Rendered, viewable and viewability rate (with impressions, clicks and billed
        figures) of every campaign's ads in one placement."""
        if not is_valid_zone(time_zone):
            raise validation_error(("time_zone", "must be an IANA time zone name"))
        store.get_placement(placement_id)  # 404: unknown placement
        first, last = report_span(
            first, last, local_day(clock.now(), time_zone), granularity,
            max_hourly_days if granularity == "hour" else max_days)
        start, end = local_days_span(first, last, time_zone)
        rows = rollups.query(start=start, end=end, placement=placement_id,
                             granularity=granularity, group_by=group_by, time_zone=time_zone)
        head = {"placement": placement_id, "from": first, "to": last, "time_zone": time_zone,
                "granularity": granularity, "group_by": group_by, "currency": currency}
        return _answer(request, rows, head, "placement-rollups.csv")

    return router


def report_span(first: date | None, last: date | None, today: date,
                granularity: Granularity, limit_days: int) -> tuple[date, date]:
    """The local days ``first``..``last`` a report covers (each defaults: ``last`` to
    ``today``, ``first`` to ``last``).

    Raises:
        ApiError: 422 naming ``from`` when it is after ``to``, or ``to`` when the span
            reaches ``limit_days`` days.
    """
    last = last or today
    first = first or last
    if first > last:
        raise validation_error(("from", "must be on or before to"))
    if last - first >= timedelta(days=limit_days):
        raise validation_error(("to", f"{'a daily' if granularity == 'day' else 'an hourly'}"
                                      f" report spans at most "
                                      f"{limit_days} days"))
    return first, last


def _answer(request: Request, rows: list[ReportRow], head: dict[str, Any],
            filename: str) -> Response | RollupReportOut:
    if CSV_MEDIA_TYPE in request.headers.get("accept", "").lower():
        return Response(
            rollup_csv(rows, head["group_by"], head["currency"]),
            media_type=f"{CSV_MEDIA_TYPE}; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        )
    start, _ = local_days_span(head["from"], head["to"], head["time_zone"])
    return RollupReportOut.model_validate({
        **head,
        "totals": _totals_out(total(rows, start)),
        "rows": [RollupRowOut(period_start=r.period_start, campaign_id=r.campaign_id,
                              ad_id=r.ad_id, placement=r.placement,
                              **_totals_out(r).model_dump()) for r in rows],
    })


def _totals_out(r: ReportRow) -> RollupTotalsOut:
    return RollupTotalsOut(
        impressions=r.impressions, clicks=r.clicks, conversions=r.conversions,
        billed_micros=r.billed_micros, absorbed_micros=r.absorbed_micros, ivt=r.ivt,
        ctr=r.ctr, ecpm_micros=r.ecpm_micros,
        cost_per_conversion_micros=r.cost_per_conversion_micros,
        rendered=r.rendered, viewable=r.viewable, viewability_rate=r.viewability_rate,
    )


def rollup_csv(rows: Sequence[ReportRow], group_by: GroupBy,
               currency: str = DEFAULT_CURRENCY) -> str:
    """CSV of report rows: ``period_start`` (ISO 8601 with its offset), the group's
    columns (:data:`GROUP_COLUMNS`), the counts, micros and metrics (an empty cell for
    null), ``currency`` (of the micros), then ``ivt_<reason>`` for each reason seen in
    ``rows``, sorted (0 where none).
    """
    reasons = ivt_reasons(rows)
    keys = GROUP_COLUMNS[group_by]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["period_start", *keys, *_METRICS, "currency",
                     *(f"ivt_{r}" for r in reasons)])
    for row in rows:
        values = (getattr(row, name) for name in (*keys, *_METRICS))
        writer.writerow([row.period_start.isoformat(),
                         *("" if v is None else v for v in values), currency,
                         *(row.ivt.get(r, 0) for r in reasons)])
    return out.getvalue()
