"""What each dashboard page shows, gathered from the API (as the viewer) and the
server's own state (:mod:`adfunnel.ui.facts`). No HTTP here beyond the in-process
:class:`~adfunnel.ui.api_client.ApiClient`; the routes render what these return."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from adfunnel.money import format_units
from adfunnel.ui.api_client import ApiClient
from adfunnel.ui.delivery import DeliveryStatus, delivery_status
from adfunnel.ui.facts import ServerFacts, local_midnight
from adfunnel.ui.selling import sale_progress
from adfunnel.ui.session import Viewer


def servable(ads: list[dict[str, Any]]) -> int:
    """Ads that can serve: approved and active."""
    return sum(1 for a in ads if a.get("review_state") == "approved"
               and a.get("status") == "active")


async def campaign_rows(api: ApiClient, facts: ServerFacts, viewer: Viewer,
                        advertiser_id: int | None) -> list[dict[str, Any]]:
    """One row per campaign the viewer may see (an advertiser: its own only), with its
    delivery status, today's spend against budget, pacing mode and p."""
    scope = viewer.advertiser_id if viewer.is_advertiser else advertiser_id
    campaigns = await api.items("/v1/campaigns", advertiser_id=scope)
    ids = [c["id"] for c in campaigns]
    budget = await facts.budget_rows(ids)
    billed = facts.billed_today(campaigns)
    since = min((local_midnight(facts.today(c["time_zone"]), c["time_zone"])
                 for c in campaigns), default=facts.now())
    matched = facts.matched_requests(ids, since) if facts.measures_traffic() else None
    capped = facts.capped_requests(ids, since)
    ads = facts.ads_of(ids)
    return [_row(c, ads[c["id"]], facts, budget.get(c["id"]),
                 None if matched is None else matched.get(c["id"], 0),
                 capped.get(c["id"], 0), billed.get(c["id"], 0)) for c in campaigns]


def _row(c: dict[str, Any], ads: list[dict[str, Any]], facts: ServerFacts, budget: Any,
         matched: int | None, capped: int, billed: int) -> dict[str, Any]:
    known = facts.delivery_facts(c, servable(ads), budget, matched, capped, billed)
    status = delivery_status(known)
    spent = max(billed, budget.billed_micros if budget else 0)
    day_budget = budget.budget_micros if budget else c["daily_budget_micros"]
    return {"campaign": c, "status": status, "spend_micros": spent,
            "budget_micros": day_budget, "spend_pct": _pct(spent, day_budget),
            "p": budget.p if budget else None, "lam": budget.lam if budget else None,
            "ads": len(ads),
            "pending_ads": sum(1 for a in ads if a.get("review_state") != "approved"),
            "matched": matched, "capped": capped, "facts": known}


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


async def campaign_page(api: ApiClient, facts: ServerFacts, campaign_id: int
                        ) -> dict[str, Any]:
    """The campaign page: record, ads, today's hourly rollups, the pacing chart's data,
    the delivery row (status, spend, p) and, for a goal or flight line, its progress
    (:func:`adfunnel.ui.selling.sale_progress`)."""
    c = await api.get(f"/v1/campaigns/{campaign_id}")
    ads = await api.items(f"/v1/campaigns/{campaign_id}/ads")
    report = await api.get(f"/v1/campaigns/{campaign_id}/report/rollups",
                           granularity="hour")
    hourly = {datetime.fromisoformat(r["period_start"]): r["billed_micros"]
              for r in report["rows"]}
    since = local_midnight(facts.today(c["time_zone"]), c["time_zone"])
    matched = (facts.matched_requests([c["id"]], since).get(c["id"], 0)
               if facts.measures_traffic() else None)
    capped = facts.capped_requests([c["id"]], since).get(c["id"], 0)
    billed = facts.billed_today([c])[c["id"]]
    budget = (await facts.budget_rows([c["id"]])).get(c["id"])
    row = _row(c, ads, facts, budget, matched, capped, billed)
    sale = await sale_progress(api, c, facts.today(c["time_zone"]))
    return {"campaign": c, "ads": ads, "report": report, "row": row, "sale": sale,
            "hours": [_hour_row(r, c["time_zone"]) for r in report["rows"]],
            "chart": await facts.pacing_chart(c, hourly)}


def _hour_row(r: dict[str, Any], tz: str) -> dict[str, Any]:
    from adfunnel.campaigns.schedule import zone

    start = datetime.fromisoformat(r["period_start"]).astimezone(zone(tz))
    return {**r, "local_hour": start.strftime("%H:00")}


def money(micros: int | None, currency: str = "") -> str:
    """Micros as units with cents, for people; an em dash for none."""
    return "—" if micros is None else format_units(int(micros), currency)


STATUS_TONE = {
    DeliveryStatus.DELIVERING: "good",
    DeliveryStatus.LIMITED_BY_BUDGET: "warn",
    DeliveryStatus.LIMITED_BY_BID: "warn",
    DeliveryStatus.LIMITED_BY_TARGETING: "warn",
    DeliveryStatus.CAPPED: "warn",
    DeliveryStatus.NO_APPROVED_ADS: "warn",
    DeliveryStatus.PAUSED: "idle",
    DeliveryStatus.SCHEDULED: "idle",
    DeliveryStatus.ENDED: "idle",
    DeliveryStatus.COMPLETED: "done",
}
