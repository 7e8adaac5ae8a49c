"""The ledger report of one campaign (``GET /v1/campaigns/{id}/report``): billed figures
per local day from the ledger, with invalid traffic and the measured rendered and
viewable impressions per local day from the rollups.

``rendered`` and ``viewable`` are valid render (``/i``) and viewable (``/vi``) events,
never billed; ``viewability_rate`` = viewable / rendered, null without renders (it is
measured by the page's tag, never assumed). A day with renders but no ledger total (a
``viewable``-billed campaign none of whose ads was seen) is listed with zero billed
figures.
"""

from __future__ import annotations

from collections import Counter
from datetime import date
from typing import Any

from adfunnel.api.report_schemas import ReportDay, ReportOut
from adfunnel.billing.charges import lifetime_left
from adfunnel.billing.ledger import Ledger
from adfunnel.billing.model import DayTotals
from adfunnel.billing.rollup_store import RollupStore
from adfunnel.billing.rollups import (
    ReportRow,
    cost_per_conversion_micros,
    ctr,
    ecpm_micros,
    local_days_span,
    viewability_rate,
)


def report(
    ledger: Ledger, campaign_id: int, first: date, last: date,
    lifetime_budget_micros: int | None = None,
    ivt: dict[date, dict[str, int]] | None = None,
    measured: dict[date, tuple[int, int]] | None = None,
    period: dict[str, Any] | None = None,
) -> ReportOut:
    """Totals and per-day rows of ``ledger.day_totals`` for local days ``first``..``last``,
    and the lifetime budget's billed and remaining micros over every day; ``ivt``: per
    local day, invalid events per reason (None: not kept); ``measured``: per local day,
    (rendered, viewable) valid events (:func:`rollup_days`; None: not kept, read as 0)."""
    by_date = {r.day: r for r in ledger.day_totals(campaign_id, first, last)}
    by_day = ivt or {}
    seen = measured or {}
    for d in seen:  # renders without a billed event that day still make a row
        by_date.setdefault(d, DayTotals(d, 0, 0, 0, 0))
    rows = [by_date[d] for d in sorted(by_date)]
    days = [
        ReportDay(
            day=r.day,
            impressions=r.impressions,
            clicks=r.clicks,
            billed_micros=r.billed_micros,
            absorbed_overspend_micros=r.absorbed_micros,
            ctr=_ctr(r.clicks, r.impressions),
            ecpm_micros=_ecpm(r.billed_micros, r.impressions),
            conversions=r.conversions,
            cost_per_conversion_micros=cost_per_conversion_micros(r.billed_micros,
                                                                  r.conversions),
            ivt=by_day.get(r.day, {}),
            rendered=seen.get(r.day, (0, 0))[0],
            viewable=seen.get(r.day, (0, 0))[1],
            viewability_rate=viewability_rate(*reversed(seen.get(r.day, (0, 0)))),
        )
        for r in rows
    ]
    total_ivt: Counter[str] = Counter()
    for reasons in by_day.values():
        total_ivt.update(reasons)
    imps = sum(r.impressions for r in rows)
    clicks = sum(r.clicks for r in rows)
    billed = sum(r.billed_micros for r in rows)
    conversions = sum(r.conversions for r in rows)
    rendered = sum(d.rendered for d in days)
    viewable = sum(d.viewable for d in days)
    lifetime = ledger.lifetime_billed(campaign_id).get(campaign_id, 0)
    return ReportOut.model_validate(
        {
            "campaign_id": campaign_id,
            "from": first,
            "to": last,
            "impressions": imps,
            "clicks": clicks,
            "billed_micros": billed,
            "absorbed_overspend_micros": sum(r.absorbed_micros for r in rows),
            "ctr": _ctr(clicks, imps),
            "ecpm_micros": _ecpm(billed, imps),
            "conversions": conversions,
            "cost_per_conversion_micros": cost_per_conversion_micros(billed, conversions),
            "rendered": rendered,
            "viewable": viewable,
            "viewability_rate": viewability_rate(viewable, rendered),
            "days": days,
            "ivt": None if ivt is None else dict(sorted(total_ivt.items())),
            "lifetime_budget_micros": lifetime_budget_micros,
            "lifetime_billed_micros": lifetime,
            "lifetime_remaining_micros": lifetime_left(lifetime_budget_micros, lifetime),
            "period": period,
        }
    )


def rollup_days(rollups: RollupStore, campaign_id: int, first: date, last: date,
                time_zone: str) -> dict[date, ReportRow]:
    """The campaign's rollups summed per local day ``first``..``last`` of ``time_zone``
    (days without any left out)."""
    start, end = local_days_span(first, last, time_zone)
    rows = rollups.query(start=start, end=end, campaign_ids=[campaign_id],
                         granularity="day", group_by="campaign", time_zone=time_zone)
    return {r.period_start.date(): r for r in rows}


def ivt_by_day(rollups: RollupStore, campaign_id: int, first: date, last: date,
               time_zone: str) -> dict[date, dict[str, int]]:
    """Invalid events per reason on each local day ``first``..``last`` of ``time_zone``,
    from the rollups (days with none are left out)."""
    days = rollup_days(rollups, campaign_id, first, last, time_zone)
    return {d: dict(r.ivt) for d, r in days.items() if r.ivt}


def measured_by_day(days: dict[date, ReportRow]) -> dict[date, tuple[int, int]]:
    """(rendered, viewable) per local day of :func:`rollup_days` (days with none left
    out)."""
    return {d: (r.rendered, r.viewable) for d, r in days.items() if r.rendered or r.viewable}


def _ctr(clicks: int, impressions: int) -> float:
    return ctr(clicks, impressions) or 0.0


def _ecpm(billed_micros: int, impressions: int) -> int:
    """Billed micros per 1000 impressions, rounded down (so never above the CPM price
    billed, hence the bid); 0 without impressions."""
    return ecpm_micros(billed_micros, impressions) or 0
