"""The ``openrtb`` section of ``adfunnel replay --openrtb``'s report.

Measured, not assumed: requests, bids, no-bids by reason and wins are what the
exchange side (:class:`~adfunnel.sim.replay_openrtb.OpenRtbReplayer`) sent and got;
notices taken and refused are the server's own counts (``/v1/ledger/stats``'s tracker
counts, ``notice_<notice>_<outcome>``); spend, clearing prices and the money checks are
read from the ledger table of the started server's database. What was not measured
(``--server``: the replay cannot read that server's database) is null.

Money checks (as the main replay's): ``above_budget_days`` — campaign-days whose billed
sum exceeds the daily budget; ``billed_twice`` — (impression id, event type) pairs with
more than one ledger row; ``above_bid`` — billed impressions whose clearing price (a
CPM impression's exact charge, ``charge_millimicros``: its price per mille in micros)
is above our bid; ``late_billed`` — impressions whose only billing
notice came after its token expired, yet billed.
"""

from __future__ import annotations

from typing import Any

from adfunnel.sim.ivt_recall import CHUNK
from adfunnel.sim.replay_openrtb import OpenRtbReplayer

#: The exchange's bad notices and the server's refusal count that must match each.
REFUSALS = {"forged": "notice_bill_refused_bad_signature",
            "above_bid": "notice_bill_refused_above_bid",
            "page": "notice_bill_refused_no_notice_proof",
            "late": "notice_bill_refused_expired"}


def openrtb_report(replayer: OpenRtbReplayer, database_url: str | None) -> dict[str, Any]:
    """The ``openrtb`` section (module doc)."""
    rtb, s = replayer.rtb, replayer.stats
    stats = replayer.http.get("/v1/ledger/stats").json()  # settles the events first
    tracker: dict[str, int] = stats.get("tracker", {})
    notices = {k.removeprefix("notice_"): v for k, v in sorted(tracker.items())
               if k.startswith("notice_")}
    ratios = rtb.clearing_ratios
    out: dict[str, Any] = {
        "requests": s.requests, "bids": rtb.bids,
        "no_bids": {**dict(sorted(rtb.no_bid_reasons.items())),
                    "no_content_204": rtb.no_content},
        "wins": rtb.wins, "losses": rtb.losses,
        "win_rate": round(rtb.wins / rtb.bids, 4) if rtb.bids else None,
        "clearing_to_bid_sent": {"mean": round(sum(ratios) / len(ratios), 4) if ratios
                                 else None, "max": round(max(ratios), 4) if ratios else None},
        "notices_sent": dict(sorted(rtb.sent.items())),
        "notices_server": notices,
        "bad_notices": {kind: {"sent": rtb.sent.get(kind, 0),
                               "refused_by_server": tracker.get(name, 0)}
                        for kind, name in REFUSALS.items()},
        "spend_micros": None, "billed_impressions": None, "clearing": None,
        "money_checks": None,
    }
    if database_url is not None:
        out.update(_ledger_figures(replayer, database_url))
    return out


def _ledger_figures(replayer: OpenRtbReplayer, url: str) -> dict[str, Any]:
    """Spend, clearing prices against our bids and the money checks, from the ledger."""
    from sqlalchemy import func, select

    from adfunnel.billing.tables import ledger
    from adfunnel.db import make_engine

    won = replayer.rtb.won
    budgets = {cid: c["record"]["daily_budget_micros"] for cid, c in replayer.campaigns.items()}
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            spend = conn.execute(select(func.coalesce(func.sum(ledger.c.billed_micros), 0))
                                 ).scalar_one()
            days = conn.execute(select(ledger.c.campaign_id, ledger.c.day,
                                       func.sum(ledger.c.billed_micros))
                                .group_by(ledger.c.campaign_id, ledger.c.day)).all()
            twice = conn.execute(select(func.count()).select_from(
                select(ledger.c.impression_id).group_by(ledger.c.impression_id,
                                                        ledger.c.event_type)
                .having(func.count() > 1).subquery())).scalar_one()
            ids = sorted(won)
            billed: dict[str, int | None] = {}
            for i in range(0, len(ids), CHUNK):
                # a CPM impression's exact charge in millimicros is its price per mille
                # in micros: the clearing price the billing notice billed
                q = select(ledger.c.impression_id, ledger.c.charge_millimicros).where(
                    ledger.c.event_type == "impression",
                    ledger.c.impression_id.in_(ids[i:i + CHUNK]))
                billed.update((r[0], r[1]) for r in conn.execute(q))
    finally:
        engine.dispose()
    ratios = [p / won[iid] for iid, p in billed.items() if p is not None]
    over = [{"campaign_id": cid, "day": str(day), "billed_micros": int(total),
             "budget_micros": budgets[cid]}
            for cid, day, total in days if cid in budgets and total > budgets[cid]]
    return {
        "spend_micros": int(spend),
        "billed_impressions": len(billed),
        "clearing": {
            "billed_with_price": len(ratios),
            "mean_ratio_to_bid": round(sum(ratios) / len(ratios), 4) if ratios else None,
            "max_ratio_to_bid": round(max(ratios), 4) if ratios else None,
            "above_bid": sum(1 for iid, p in billed.items() if p is not None and p > won[iid]),
        },
        "money_checks": {
            "above_budget_days": over,
            "billed_twice": int(twice),
            "late_billed": sum(1 for iid in replayer.rtb.late_ids if iid in billed),
        },
    }
