"""The ``auto-bidding`` day scenario (issue #27): a ``max_clicks`` campaign against a
manual twin on a real bid landscape, both judged from the ledger.

Two passes over the same traffic (one seed: the landscape campaigns' own random stream,
``Track.rng``, draws the same requests, rows and clicks in both, whatever the
controllers do):

1. the ``max_clicks`` campaign (budget ``BUDGET_MICROS``, no cap: v = 1 % of the
   budget) bids ⌊v ÷ λ⌋ per click with λ from its ad server's budget client, stepped
   by the production budget service; its average CPC is read from the ledger;
2. a ``manual`` campaign, same budget and traffic, bids that average CPC per click.

Targets (the issue): the max_clicks campaign bills ≥ 98 % of its budget where traffic
allows it (what its requests would bill at λ = 1, counted from the simulation's own
draws, is ≥ 1.05 × what the budget asks of the window), never above it (charged above
budget and absorbed overspend 0, from the simulation's charges and the ledger), and
gets more clicks (ledger) than the manual twin. No figure comes from a controller.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from adfunnel.billing.model import EventType
from adfunnel.campaigns.bidding_terms import derived_bid_micros
from adfunnel.campaigns.model import BidStrategy, BidType
from adfunnel.campaigns.schedule import day_bounds
from adfunnel.sim.day import DaySim
from adfunnel.sim.day_report import TRAFFIC_ALLOWS_MARGIN, _window_ask
from adfunnel.sim.day_track import Track
from adfunnel.sim.scenarios import D, Scenario, SimCampaign

AUTO_BIDDING = "auto-bidding"
#: The campaigns' daily budget, micros (CNY: the landscape's prices are real fen).
BUDGET_MICROS = 20_000_000
#: Eligible requests a day: at λ = 1 they would bill about 5 × the budget.
REQUESTS_PER_DAY = 150_000
#: Share of the budget the max_clicks campaign must bill where traffic allows.
DELIVERY_MIN = 0.98
#: The short form's bound on the share of its window's ask: four hours carry the noise
#: of ~340 clicks (seeds 0, 1, 2 measured 0.990, 0.987, 0.972); the day's 0.98 is
#: judged on the full day.
SHORT_DELIVERY_MIN = 0.95
MAX_CLICKS_ID, MANUAL_ID = 90, 91
#: Where both campaigns serve.
TIME_ZONE = "Europe/Berlin"


def auto_bidding_scenario() -> Scenario:
    """The max_clicks campaign's scenario (the first pass). Its short form is 10:00 to
    14:00 Berlin, started as if the day so far went to plan (λ starts cold, as a fresh
    service's does). Two ad servers, not three: half the reports to simulate."""
    v = derived_bid_micros(BidStrategy.MAX_CLICKS, daily_budget_micros=BUDGET_MICROS)
    assert v is not None
    c = SimCampaign(MAX_CLICKS_ID, TIME_ZONE, BidType.CPC, v, BUDGET_MICROS, 1.0,
                    strategy=BidStrategy.MAX_CLICKS, landscape=True,
                    requests_per_day=REQUESTS_PER_DAY)
    return Scenario(AUTO_BIDDING, D, (c,), servers=2,
                    short_window=(datetime(2026, 10, 20, 8, tzinfo=UTC),
                                  datetime(2026, 10, 20, 12, tzinfo=UTC)),
                    notes="max_clicks (no cap) on the iPinYou 1458 landscape, then a "
                          "manual twin at its realised average CPC on the same traffic")


def manual_twin(sc: Scenario, bid_micros: int) -> Scenario:
    """The second pass: the same campaign, manual, bidding ``bid_micros`` per click."""
    c = replace(sc.campaigns[0], id=MANUAL_ID, strategy=BidStrategy.MANUAL,
                bid_micros=max(1, bid_micros))
    return replace(sc, campaigns=(c,))


def campaign_figures(sim: DaySim, tr: Track) -> dict[str, Any]:
    """One pass's figures of its campaign: spend and clicks from the ledger, charged
    (uncapped) from the simulation's own charges, the λ = 1 spend from its own draws."""
    c, d = tr.campaign, sim.sc.day
    ds, de = day_bounds(d, c.time_zone)
    s0, s1 = max(ds.timestamp(), sim.start.timestamp()), min(de.timestamp(), sim.end.timestamp())
    totals = sim.ledger.day_totals(c.id, d, d)
    billed = totals[0].billed_micros if totals else 0
    absorbed = totals[0].absorbed_micros if totals else 0
    rows, _ = sim.ledger.rows_between(ds, de)
    clicks = [b for ev, b, _ in rows if ev.campaign_id == c.id
              and ev.event_type == EventType.CLICK and ev.day == d]
    click_billed = sum(clicks)
    ask = _window_ask(sim, tr, s0, s1)
    ceiling_billed, ceiling_clicks = tr.ceiling.get(d, [0, 0])
    lam = tr.lam_used
    return {
        "campaign_id": c.id,
        "bid_strategy": c.bid_strategy.value,
        "bid_micros": c.bid_micros,
        "daily_budget_micros": c.daily_budget_micros,
        "billed_micros": billed,
        "spend_share": round(billed / c.daily_budget_micros, 4),
        # the simulated window's part: the clicks' billing (the short form's earlier
        # spend is one seeded impression charge)
        "window_billed_micros": click_billed,
        "window_budget_micros": round(ask),
        "window_spend_share": round(click_billed / ask, 4) if ask else None,
        "charged_above_budget_micros": max(0, tr.charged.get(d, 0) - c.daily_budget_micros),
        "absorbed_overspend_micros": absorbed,
        "clicks": totals[0].clicks if totals else 0,
        "avg_cpc_micros": round(click_billed / len(clicks)) if clicks else None,
        "eligible_requests": tr.eligible.get(d, 0),
        "serves": tr.serves,
        "lambda1_billed_micros": ceiling_billed,
        "lambda1_clicks": ceiling_clicks,
        "traffic_allows": ask > 0 and ceiling_billed >= TRAFFIC_ALLOWS_MARGIN * ask,
        "lambda_min": min(lam) if lam else None,
        "lambda_max": max(lam) if lam else None,
        # λ of the bids beyond the cold start: 5th, 50th and 95th percentiles
        "lambda_percentiles": [round(float(v), 3) for v in np.percentile(lam, [5, 50, 95])]
        if lam else None,
        "lambda_steps": [[round(t, 1), round(v, 3)]
                         for t, v in tr.lam_steps[:: max(1, len(tr.lam_steps) // 96)]],
    }


def _pass(sc: Scenario, seed: int, short: bool,
          progress: Callable[[int, int], None] | None) -> tuple[DaySim, dict[str, Any]]:
    sim = DaySim(sc, seed, short)
    sim.run(progress)
    return sim, campaign_figures(sim, sim.tracks[sc.campaigns[0].id])


def run_auto_bidding(report_path: Path | None = None, seed: int = 0, short: bool = False,
                     progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Both passes (module docstring); returns (and writes to ``report_path`` as JSON)
    ``{"scenario", "short", "seed", "window", "wall_s", "design", "max_clicks",
    "manual", "targets"}``, each target ``{"target", "value", "met"}``."""
    t = time.perf_counter()
    sc = auto_bidding_scenario()
    sim, auto = _pass(sc, seed, short, progress)
    cpc = auto["avg_cpc_micros"] or 1
    _, manual = _pass(manual_twin(sc, cpc), seed, short, progress)
    key, floor = ("window_spend_share", SHORT_DELIVERY_MIN) if short else (
        "spend_share", DELIVERY_MIN)
    share = auto[key] or 0.0
    targets = [
        {"target": f"max_clicks {key} >= {floor} (traffic allows: "
                   f"{auto['traffic_allows']})", "value": share,
         "met": share >= floor if auto["traffic_allows"] else None},
        {"target": "never above budget (charged above + absorbed, micros)",
         "value": auto["charged_above_budget_micros"] + auto["absorbed_overspend_micros"],
         "met": auto["charged_above_budget_micros"] + auto["absorbed_overspend_micros"] == 0},
        {"target": "max_clicks clicks > manual clicks at its average CPC",
         "value": [auto["clicks"], manual["clicks"]], "met": auto["clicks"] > manual["clicks"]},
    ]
    result = {
        "scenario": AUTO_BIDDING, "short": short, "seed": seed,
        "window": [sim.start.isoformat(), sim.end.isoformat()],
        "wall_s": round(time.perf_counter() - t, 2),
        "design": "two passes on the same traffic: max_clicks first, then manual bidding "
                  "its realised average CPC (ledger)",
        "max_clicks": auto, "manual": manual, "targets": targets,
    }
    if report_path is not None:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(result, indent=1))
    return result


def summary_lines(result: dict[str, Any]) -> list[str]:
    """What ``adfunnel simulate --scenario auto-bidding`` prints."""
    out = [f"scenario {result['scenario']} ({'short' if result['short'] else 'full day'}, "
           f"{result['wall_s']} s): {result['design']}",
           f"{'strategy':<12} {'bid/v':>9} {'budget':>8} {'billed':>8} {'share':>6} "
           f"{'clicks':>6} {'avg CPC':>8} {'λ=1 bill':>9} {'λ min':>7} {'λ max':>8}"]
    for name in ("max_clicks", "manual"):
        c = result[name]
        lam = ("n/a", "n/a") if c["lambda_min"] is None else (
            f"{c['lambda_min']:.2f}", f"{c['lambda_max']:.2f}")
        # the short form judges its window (its day so far is one seeded charge)
        budget, billed, share = (c["window_budget_micros"], c["window_billed_micros"],
                                 c["window_spend_share"]) if result["short"] else (
            c["daily_budget_micros"], c["billed_micros"], c["spend_share"])
        out.append(
            f"{name:<12} {c['bid_micros'] / 1e6:>9.4f} {budget / 1e6:>8.2f} "
            f"{billed / 1e6:>8.3f} {share or 0:>6.3f} {c['clicks']:>6} "
            f"{(c['avg_cpc_micros'] or 0) / 1e6:>8.4f} {c['lambda1_billed_micros'] / 1e6:>9.2f} "
            f"{lam[0]:>7} {lam[1]:>8}")
    for tg in result["targets"]:
        verdict = "n/a" if tg["met"] is None else ("met" if tg["met"] else "MISSED")
        out.append(f"  [{verdict}] {tg['target']}: {tg['value']}")
    out.append("units: money in CNY (real iPinYou fen prices); share = billed / budget "
               "(ledger; short form: the window's billed / what the plan asks of it); "
               "λ=1 bill = what the requests would bill at the ceiling bid; λ min/max: "
               "of the bids made")
    return out
