"""The replay's report: what a :class:`~adfunnel.sim.replayer.Replayer` sent and the
server's figures after the run (campaigns, ledger, caps, events and invalid traffic), each
campaign's potential spend, the served log read back, and the learned model's figures.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from adfunnel.sim.ipinyou import LogRow
from adfunnel.sim.ivt_recall import distinct_events
from adfunnel.sim.learn import BASE_CTR, MAX_CTR, SIGMA, last_day_figures, split_last_day
from adfunnel.sim.potential import Bidder, potential_micros
from adfunnel.sim.replay_plans import SIZES
from adfunnel.sim.replayer import RENDER_RATE, Replayer


def potential(replayer: Replayer, rows: list[LogRow], pctr_prior: float
              ) -> dict[int, dict[str, int]]:
    """Each of the nine campaigns' potential spend per local day at p = 1, by the
    replay's own model of the rows it could win (:mod:`adfunnel.sim.potential`),
    with the replay's click model of scaled average CTRs."""
    bidders = [Bidder(cid, r["bid_type"], r["bid_micros"], r["daily_budget_micros"],
                      c["plan"].targeting, frozenset(SIZES), r["time_zone"],
                      min(1.0, c["info"].ctr * replayer.ctr_scale), pctr_prior)
               for cid, c in replayer.campaigns.items() for r in (c["record"],)]
    return potential_micros(rows, bidders, RENDER_RATE)


def report(replayer: Replayer, first: datetime, last: datetime) -> dict[str, Any]:
    """What ``replayer`` sent and got, with the server's figures from ``first`` to
    ``last``: requests, fill, latency, each campaign's days, the ledger, the beacons
    fired, caps, the catalogue, events and invalid traffic, errors, the click model."""
    s = replayer.stats
    lat = np.array(s.latencies_ms) if s.latencies_ms else np.zeros(1)
    campaigns = []
    pacing = replayer.http.get("/v1/budget/pacing")
    summary = pacing.json() if pacing.status_code == 200 else None
    refusals = summary["budget_refusals"] if summary else {}
    for cid, c in sorted(replayer.campaigns.items()):
        rep = replayer.http.get(f"/v1/campaigns/{cid}/report", params={
            "from": first.date().isoformat(), "to": last.date().isoformat()}).json()
        budget = c["record"]["daily_budget_micros"]
        refused = refusals.get(str(cid), {})
        days = [{"date": d["day"], "budget_micros": budget, "billed_micros": d["billed_micros"],
                 "absorbed_overspend_micros": d["absorbed_overspend_micros"],
                 "impressions": d["impressions"], "clicks": d["clicks"],
                 # refused for budget (exhausted, no slice) at least once that day
                 "budget_bound": (refused.get(d["day"], 0) > 0) if summary else None}
                for d in rep["days"]]
        campaigns.append({
            "campaign_id": cid, "name": c["record"]["name"], "label": c["record"]["name"],
            "bid_type": c["record"]["bid_type"], "bid_micros": c["record"]["bid_micros"],
            "pacing_mode": c["record"]["pacing_mode"],
            "daily_budget_micros": budget, "billed_micros": rep["billed_micros"],
            "absorbed_overspend_micros": rep["absorbed_overspend_micros"],
            "impressions": rep["impressions"], "clicks": rep["clicks"],
            "budget_bound_days": sum(bool(d["budget_bound"]) for d in days),
            "days": days,
        })
    ledger = replayer.http.get("/v1/ledger/stats").json()
    serving = replayer.http.get("/v1/serving/stats").json()
    return {
        "requests": s.requests,
        "filled_slots": s.filled_slots,
        "fill_rate": round(s.filled_slots / s.requests, 4) if s.requests else 0.0,
        "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 3),
                       "p99": round(float(np.percentile(lat, 99)), 3)},
        "late_decisions": serving["late"],
        "committed_decisions": serving["decisions"] - serving["late"] - serving["shed"],
        "pacing": ({"steps": summary["steps"], "p_min": summary["p_min"]} if summary
                   else {"steps": None, "p_min": None}),
        "campaigns": campaigns,
        "ledger": {"rows": ledger["rows"], "duplicates_rejected": ledger["duplicates_rejected"],
                   "invalid_tokens": ledger["invalid_tokens"]},
        "fired": {"impressions": s.impressions_fired, "duplicates": s.duplicates_fired,
                  "clicks": s.clicks_fired, "forged": s.forged_fired,
                  "forged_refused": s.forged_refused, "bad_redirects": s.bad_redirects},
        "caps": _caps_report(replayer, serving.get("rejections")),
        # null: no --catalogue campaigns were added
        "catalogue": ({"campaigns": len(replayer.catalogue_ids),
                       "filled_slots": replayer.catalogue_slots}
                      if replayer.catalogue_ids else None),
        "events": _events_report(replayer, ledger),
        "errors": dict(s.errors),
        "click_model": (
            f"P(click | rendered) = min({MAX_CTR}, {BASE_CTR} x exp(sum of attribute "
            f"effects ~ N(0, {SIGMA}^2)))" if replayer.clicks is not None else
            f"P(click | rendered) = min(1, {replayer.ctr_scale} x advertiser avg CTR)"),
    }


def _events_report(replayer: Replayer, ledger: dict[str, Any]) -> dict[str, Any]:
    """Beacons sent, the ledger's rows and duplicates, invalid traffic flagged per
    reason (the server's counters) and what was injected. Whether an injected event
    billed is read from the ledger after the run (``run_replay``); the beacon-to-ledger
    lag is the server aggregator's (wall clock, tracker append to ledger commit)."""
    s = replayer.stats
    counters: dict[str, int] = ledger.get("counters", {})
    ivt: dict[str, int] = {}
    for name, n in counters.items():
        for event in ("impression", "click"):
            prefix = f"ivt_{event}_"
            if name.startswith(prefix):
                reason = name[len(prefix):]
                ivt[reason] = ivt.get(reason, 0) + n
    return {
        "sent": s.impressions_fired + s.duplicates_fired + s.clicks_fired,
        "billed": ledger["rows"],
        "duplicates": ledger["duplicates_rejected"],
        "ivt": dict(sorted(ivt.items())),
        "ivt_total": counters.get("ivt_impression", 0) + counters.get("ivt_click", 0),
        "ivt_by_event": {"impression": counters.get("ivt_impression", 0),
                         "click": counters.get("ivt_click", 0)},
        "injected_invalid": len(distinct_events((i, e) for i, e, _ in replayer.injected)),
        # filled from the ledger by run_replay (adfunnel.sim.ivt_recall); null when
        # not measured (--server: the replay cannot read the impression ids)
        "injected_by_source": None,
        "injected_invalid_flagged": None,
        "injected_invalid_billed": None,
        "genuine_events": None,
        "ivt_false_positives": None,
        "lag_ms": ledger.get("events", {}).get("lag_ms", {"p50": None, "p99": None}),
    }


def _caps_report(replayer: Replayer, rejections: dict[str, int] | None) -> dict[str, Any]:
    """The capped campaigns, the server's rejections for caps (from its decision
    counts) and the most serves one user got from one capped campaign in one local
    day (from the answers received)."""
    capped = sorted(cid for cid, c in replayer.campaigns.items() if c["plan"].frequency_caps)
    return {
        "campaigns": capped,
        "cap": {str(cid): replayer.campaigns[cid]["record"]["frequency_caps"] for cid in capped},
        # null: the server does not report its rejections (not measured)
        **{name: None if rejections is None else rejections.get(reason, 0)
           for name, reason in (("capped_rejections", "capped"),
                                ("cap_unavailable", "cap_unavailable"),
                                ("no_user_key", "no_user_key"))},
        "max_serves_per_user_window": (max(replayer.capped_serves.values())
                                       if replayer.capped_serves else None),
        "users_served_capped": len({u for u, _, _ in replayer.capped_serves}),
    }


def model_report(learned: dict[str, Any], served_dir: Path, url: str, rows: list[LogRow],
                 pctr_prior: float) -> dict[str, Any]:
    """``model``: the version trained and served, its figures on the last day's billed
    events next to the smoothed-rate baseline's, its fallback share and pre-rank recall."""
    _, last_day = split_last_day(rows)
    day_start = last_day[0].timestamp.replace(hour=0, minute=0, second=0, microsecond=0)
    version = learned["model_version"]
    figures = last_day_figures(served_dir, url, version, day_start, pctr_prior, 1_000.0)
    model = figures["model"] or {}
    serving = learned.get("serving") or {}
    recall = serving.get("prerank_recall") or {}
    decisions = learned["last_day_decisions"]
    return {
        "version": version,
        "trained_rows": learned["trained_rows"], "trained_clicks": learned["trained_clicks"],
        "held_out": learned.get("metrics"),
        "last_day_rows": figures["rows"],
        "normalized_entropy": model.get("normalized_entropy"),
        # of the pCTR serving used (recalibrated), and of the model's own beside it
        "calibration_ratio": model.get("calibration_ratio"),
        # its 95 % interval from the day's click count (exact Poisson): a few dozen
        # clicks leave the ratio that uncertain
        "calibration_ratio_95": (figures.get("raw") or {}).get("calibration_ratio_95"),
        "raw_calibration_ratio": (figures.get("raw") or {}).get("raw_calibration_ratio"),
        "calibration_factor": (figures.get("raw") or {}).get("factor"),
        # the same over the last day's winners served with a factor other than 1
        "recalibrated": (figures.get("raw") or {}).get("recalibrated"),
        "calibration_by_day": figures.get("by_day"),
        "recalibration": serving.get("recalibration"),
        "auc": model.get("auc"),
        "fallback_share": round(learned["fallbacks"] / decisions, 4) if decisions else None,
        # share of checked decisions whose best candidate by the model the pre-rank kept;
        # null when no decision had more candidates than the pre-rank keeps
        "prerank_recall": recall.get("recall"),
        "prerank_recall_checked": recall.get("checked"),
        "baseline": figures["baseline"],
    }


def served_log_summary(directory: Path, database_url: str, last: datetime,
                       report: dict[str, Any]) -> dict[str, Any]:
    """What the started server's served log holds after the replay, compacted to Parquet
    and read back with DuckDB: decisions logged against those committed, winners against
    filled slots, and the join with the ledger (the trainer's input): winners, those with
    a billed impression and with a click."""
    from adfunnel.db import make_engine
    from adfunnel.events.compactor import compact
    from adfunnel.learn.query import billed_events, join_served_with_billed, query

    compact(directory, last + timedelta(days=1))
    [(records, winners)] = query(directory, "select count(*), coalesce(sum(len(winners)), 0) "
                                            "from served")
    engine = make_engine(database_url)
    try:
        joined = join_served_with_billed(directory, billed_events(engine))
    finally:
        engine.dispose()
    return {
        "records": records,
        "decisions_committed": report.get("committed_decisions"),
        "winners": winners,
        "training_rows": joined.num_rows,
        "impressed": sum(joined.column("impressed").to_pylist()),
        "clicked": sum(joined.column("clicked").to_pylist()),
    }
