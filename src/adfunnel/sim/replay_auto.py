"""Automatic bidding in the replay (issue #27): a ``max_clicks`` campaign of its own
advertiser on the real iPinYou rows, against a manual twin, both judged from the ledger.

Opt-in (``adfunnel replay --auto-bidding``): the default replay and its figures do not
change. The campaign (:func:`auto_body`) targets like 2997 (exchange 1), is paced
(pacing mode ``even``, the product's default; λ steps only for paced campaigns,
:mod:`adfunnel.budget.multipliers`), bids at most ``AUTO_CAP_MICROS`` per click and
clicks by 2997's real CTR under the replay's click model (the advertiser whose traffic
it copies). "Even" is not flat: its plan follows the campaign's traffic shape, the means
per lived hour of its eligible requests (:mod:`adfunnel.pacing.hour_means`), which the
replay's server logs and refreshes every 5 minutes of log time — measured on 20 Oct
2013, the plan puts 98.8 % of the day's budget before 18:00 and none after 19:00, where
the trace's day ends.

Why a day stops short (:func:`stop_fields`): its cap is a quarter of its budget, and
the budget service grants nothing once less than one charge (the cap, the most one
click can bill) remains, so a day ends at the first click that takes its billed spend
above budget − cap; billing ≥ 98 % needs that click to land within 2 % of the budget.

Its value is the cap, not 1 % of the budget: this log earns about eight clicks a day
on exchange 1 when every row is won, so v = budget ÷ 100 could never spend a budget
(what it would bill at λ = 1 on the full log is 1.3 CNY a day at v ≤ 1 CNY, under 2 %
of a 100 CNY budget).

Budget, checked against what traffic allows: at λ = 1 (the bid = the cap, 2 CNY) the
replay's potential model (:mod:`adfunnel.sim.potential`: every row it is eligible for
won, at the second price, by expected clicks; an upper bound) bills 9.67 to 18.10 CNY a
day on the full log (19-25 Oct 2013), ≥ 1.05 × the 8 CNY budget every day
(``days[].potential_micros``). The ceiling pass (``--auto-bidding ceiling``: the same
campaign at λ = 1 in a replay of the same rows, real rivals) billed far less, 0 to
13.46 CNY a day (seed 7, README): :func:`compare` judges the days by it.

The comparison is two replays on the same rows (a twin in the same replay would bid in
the same auctions): first the max_clicks campaign, then the same campaign bidding manual
CPC = the first's realised average CPC (its billed ÷ its clicks, ledger), with the
same budget and pacing (:func:`compare`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from adfunnel.money import MICROS_PER_UNIT
from adfunnel.sim.ipinyou import LogRow, read_train_info
from adfunnel.sim.replay_plans import SIZES, CampaignPlan, landing_url

#: The iPinYou advertiser whose targeting and real CTR the campaign copies.
AUTO_LIKE = "2997"
AUTO_TARGETING = {"attr": "exchange", "in": ["1"]}
#: The max_clicks campaign's ``bid_cap_micros`` (its value v of a click): 2 CNY.
AUTO_CAP_MICROS = 2_000_000
#: Its time zone (the log's): its days and the served log's per-day figures.
AUTO_TIME_ZONE = "Asia/Shanghai"
#: Its daily budget (and the twin's), micros: 8 CNY (module docstring).
AUTO_BUDGET_MICROS = 8_000_000
#: A day "traffic allows" when its potential at λ = 1 reaches this × the budget (as the
#: day simulation's, :data:`adfunnel.sim.day_report.TRAFFIC_ALLOWS_MARGIN`).
TRAFFIC_ALLOWS_MARGIN = 1.05
#: Share of the budget the max_clicks campaign must bill on such a day.
DELIVERY_MIN = 0.98
MAX_CLICKS = "max_clicks"
CEILING = "ceiling"
#: The ceiling pass's daily budget (1,000 CNY): never reached on this log.
CEILING_BUDGET_MICROS = 1_000_000_000
COMPARE = "compare"


@dataclass(frozen=True)
class AutoMode:
    """What ``--auto-bidding`` adds: ``max_clicks``, or ``manual`` bidding
    ``cpc_micros`` per click."""

    strategy: str
    cpc_micros: int | None = None
    #: max_clicks accelerated (published λ = 1) with a budget that never binds: what the
    #: campaign bills at its ceiling under the replay's real competition
    ceiling: bool = False


def parse_mode(value: str) -> AutoMode:
    """``max_clicks`` or ``manual:<cpc micros>`` (``compare`` is :func:`compare`'s).

    Raises:
        ValueError: anything else, or a CPC that is not a positive integer.
    """
    if value == MAX_CLICKS:
        return AutoMode(MAX_CLICKS)
    if value == CEILING:
        return AutoMode(MAX_CLICKS, ceiling=True)
    kind, _, cpc = value.partition(":")
    if kind == "manual" and cpc.isdigit() and int(cpc) > 0:
        return AutoMode("manual", int(cpc))
    raise ValueError(f"--auto-bidding: expected {MAX_CLICKS}, manual:<cpc micros> or "
                     f"{COMPARE}, got {value!r}")


def auto_plan() -> CampaignPlan:
    """The campaign as the replay's report and potential model see it."""
    return CampaignPlan(f"auto-{AUTO_LIKE}", "CPC", AUTO_BUDGET_MICROS / MICROS_PER_UNIT,
                        AUTO_TARGETING, "even")


def auto_body(mode: AutoMode, advertiser_id: int, start: datetime) -> dict[str, Any]:
    """The campaign's ``POST /v1/campaigns`` body: max_clicks (``bid_micros`` derived:
    the cap) or manual CPC."""
    body: dict[str, Any] = {
        "advertiser_id": advertiser_id, "name": f"auto-{mode.strategy}",
        "objective": "clicks", "bid_type": "CPC",
        "daily_budget_micros": CEILING_BUDGET_MICROS if mode.ceiling else AUTO_BUDGET_MICROS,
        "time_zone": AUTO_TIME_ZONE, "flight_start": start.date().isoformat(),
        "pacing_mode": "accelerated" if mode.ceiling else "even",
        "billable_event": "rendered", "targeting": AUTO_TARGETING,
    }
    if mode.strategy == MAX_CLICKS:
        body.update(bid_strategy=MAX_CLICKS, bid_cap_micros=AUTO_CAP_MICROS)
    else:
        body["bid_micros"] = mode.cpc_micros
    return body


def create_auto(replayer: Any, start: datetime, mode: AutoMode) -> int:
    """Create the campaign, its advertiser and an ad of each replay size on
    ``replayer``'s server (a :class:`~adfunnel.sim.replayer.Replayer`); register it
    with the nine so that it is reported, judged and clicked like them. Its id."""
    adv = replayer._post("/v1/advertisers", {"name": "auto-bidding"})
    replayer.advertiser_ids.append(adv["id"])
    campaign = replayer._post("/v1/campaigns", auto_body(mode, adv["id"], start))
    replayer.campaigns[campaign["id"]] = {"plan": auto_plan(), "record": campaign,
                                          "info": read_train_info(AUTO_LIKE,
                                                                  replayer.data_root)}
    for size in SIZES:
        w, h = (int(x) for x in size.split("x"))
        ad = replayer._post(f"/v1/campaigns/{campaign['id']}/ads", {
            "landing_url": landing_url(f"auto{AUTO_LIKE}"),
            "creative_ref": f"auto/{size}.png", "format": "banner", "width": w, "height": h,
        })
        replayer.landing[ad["id"]] = ad["landing_url"]
        replayer.ad_sizes[ad["id"]] = size
    return int(campaign["id"])


def auto_figures(campaign: dict[str, Any], lam: dict[str, Any] | None,
                 dates: list[str]) -> dict[str, Any]:
    """One pass's figures of the campaign, from its entry of the replay report's
    ``campaigns`` (ledger; days judged by :func:`adfunnel.sim.potential.judge_delivery`)
    and ``lam`` (:func:`served_lambda`): per day billed ÷ budget, clicks, absorbed
    overspend, potential at λ = 1 and whether traffic allows the budget, and why a day
    stopped short (:func:`stop_fields`); the totals; the average CPC (billed ÷ clicks: a
    CPC campaign bills clicks only)."""
    budget = campaign["daily_budget_micros"]
    reported = {d["date"]: d for d in campaign["days"]}
    served = (lam or {}).get("days") or {}
    # every local day of the rows, those the ledger has nothing of with zeros
    zero = {"billed_micros": 0, "clicks": 0, "absorbed_overspend_micros": 0}
    days = [{"date": d["date"], "budget_micros": budget, "billed_micros": d["billed_micros"],
             "share": round(d["billed_micros"] / budget, 4), "clicks": d["clicks"],
             "absorbed_overspend_micros": d["absorbed_overspend_micros"],
             "potential_micros": d.get("potential_micros", 0),
             "traffic_allows": d.get("potential_micros", 0) >= TRAFFIC_ALLOWS_MARGIN * budget,
             **stop_fields(budget, d["billed_micros"], campaign["bid_micros"],
                           d.get("budget_bound"), served.get(d["date"]))}
            for date in sorted(set(dates) | set(reported))
            for d in ({"date": date, **zero, **reported.get(date, {})},)]
    billed, clicks = campaign["billed_micros"], campaign["clicks"]
    return judged({
        "campaign_id": campaign["campaign_id"], "name": campaign["name"],
        "bid_micros": campaign["bid_micros"], "daily_budget_micros": budget,
        "billed_micros": billed, "budget_micros": budget * len(days),
        "share": round(billed / (budget * len(days)), 4) if days else None,
        "clicks": clicks, "impressions": campaign["impressions"],
        "avg_cpc_micros": round(billed / clicks) if clicks else None,
        "days_above_budget": [d["date"] for d in days if d["billed_micros"] > budget
                              or d["absorbed_overspend_micros"] > 0],
        "lambda": lam, "days": days,
    })


def judged(fig: dict[str, Any]) -> dict[str, Any]:
    """``fig`` with its days that traffic allows counted, those that met
    :data:`DELIVERY_MIN`, and the share billed over them."""
    allowed = [d for d in fig["days"] if d["traffic_allows"]]
    fig["traffic_allows_days"] = len(allowed)
    fig["met_days"] = sum(d["share"] >= DELIVERY_MIN for d in allowed)
    fig["allowed_share"] = (round(sum(d["billed_micros"] for d in allowed)
                                  / (fig["daily_budget_micros"] * len(allowed)), 4)
                            if allowed else None)
    fig["missed_below_one_charge"] = [d["date"] for d in allowed if d["share"] < DELIVERY_MIN
                                      and d["stopped_below_one_charge"]]
    return fig


def stop_fields(budget: int, billed: int, charge: int, budget_bound: bool | None,
                served: dict[str, Any] | None) -> dict[str, Any]:
    """Why a day ended where it did: ``left_micros`` (budget − billed), ``budget_bound``
    (refused for budget at least once, the report's; None: not known),
    ``stopped_below_one_charge`` (budget bound with less than one ``charge`` left — the
    campaign's bid per click, the most one click can bill — so the budget service
    granted nothing more: DESIGN.md §Money and budgets, "grants stop when less than one
    click price remains"; a CPC campaign whose cap is a quarter of its budget can stop up to
    a quarter short), and from the served log its served ads that day, their λ range
    and the local time of the last (``served``: :func:`served_lambda`'s ``days``)."""
    left = max(0, budget - billed)
    served = served or {}
    return {"left_micros": left, "budget_bound": budget_bound,
            "stopped_below_one_charge": bool(budget_bound) and left < charge,
            "served": served.get("served", 0), "lambda_min": served.get("min"),
            "lambda_max": served.get("max"), "last_served": served.get("last")}


def by_ceiling(fig: dict[str, Any], ceiling: dict[str, Any]) -> dict[str, Any]:
    """``fig`` judged by the ceiling pass instead of the potential model: a day traffic
    allows is one the same campaign at λ = 1 (accelerated, a budget that never binds)
    billed ≥ 1.05 × the budget on, in a replay of the same rows (``ceiling_micros``)."""
    spent = {d["date"]: d["billed_micros"] for d in ceiling["days"]}
    for d in fig["days"]:
        d["ceiling_micros"] = spent.get(d["date"], 0)
        d["traffic_allows"] = d["ceiling_micros"] >= TRAFFIC_ALLOWS_MARGIN * d["budget_micros"]
    fig["judged_by"] = "ceiling pass"
    return judged(fig)


def served_lambda(served_dir: Path, campaign_id: int) -> dict[str, Any]:
    """λ and the bid (micros per click) of the campaign's served ads, from the served
    log (compacted by then): min and max, and how many were served (a manual campaign
    has no λ: null); ``days``: per local day (the campaign's time zone, Asia/Shanghai)
    the same count and λ range and the local time of its last served ad ("HH:MM:SS")."""
    from adfunnel.learn.query import query

    [(n, lo, hi, bid_lo, bid_hi)] = query(
        served_dir, "select count(*), min(w.bid_multiplier), max(w.bid_multiplier), "
                    "min(w.bid_micros), max(w.bid_micros) "
                    "from (select unnest(winners) as w from served) where w.campaign_id = ?",
        [campaign_id])
    local = f"(to_timestamp(time) at time zone '{AUTO_TIME_ZONE}')"
    days = {str(day): {"served": k, "min": lo_d, "max": hi_d, "last": str(last)}
            for day, k, lo_d, hi_d, last in query(
                served_dir, f"select cast({local} as date) d, count(*), "
                            "min(w.bid_multiplier), max(w.bid_multiplier), "
                            f"strftime(max({local}), '%H:%M:%S') "
                            "from (select time, unnest(winners) as w from served) "
                            "where w.campaign_id = ? group by d order by d", [campaign_id])}
    return {"served": n, "min": lo, "max": hi, "bid_min_micros": bid_lo,
            "bid_max_micros": bid_hi, "days": days}


def compare(rows: list[LogRow], run: Callable[..., dict[str, Any]],
            report_path: Path | None = None, ceiling: bool = False,
            **kwargs: Any) -> dict[str, Any]:
    """Both passes on ``rows`` by ``run`` (:func:`adfunnel.sim.replay.run_replay`, with
    ``kwargs``): max_clicks, then manual at its average CPC; with ``ceiling`` a third,
    the ceiling pass, which judges the days instead of the potential model
    (:func:`by_ceiling`). Returns (and writes to ``report_path`` as JSON) ``{"design",
    "rows", "wall_s", "max_clicks", "manual", "ceiling", "targets"}``, each target
    ``{"target", "value", "met"}`` (met null: not judged).

    Raises:
        ValueError: ``server`` or ``database_url`` given: each pass needs a fresh server
        (the second would meet the first's campaigns and spend).
    """
    if kwargs.get("server") or kwargs.get("database_url"):
        raise ValueError("--auto-bidding compare starts a fresh server for each pass: "
                         "leave out --server and --database-url")
    t = time.perf_counter()
    first = run(rows, auto_bidding=MAX_CLICKS, **kwargs)["auto_bidding"]
    # no click: nothing to copy; the twin bids the cap
    cpc = first["avg_cpc_micros"] or AUTO_CAP_MICROS
    twin = run(rows, auto_bidding=f"manual:{cpc}", **kwargs)["auto_bidding"]
    top = run(rows, auto_bidding=CEILING, **kwargs)["auto_bidding"] if ceiling else None
    if top is not None:
        first = by_ceiling(first, top)
    result = {
        "design": "two replays on the same rows: max_clicks first, then a manual twin "
                  "bidding its realised average CPC (ledger)",
        "rows": [len(rows), rows[0].timestamp.isoformat(), rows[-1].timestamp.isoformat()],
        "wall_s": round(time.perf_counter() - t, 1),
        "max_clicks": first, "manual": twin, "ceiling": top,
        "targets": targets(first, twin),
    }
    if report_path is not None:
        report_path.write_text(json.dumps(result, indent=1))
    return result


def targets(first: dict[str, Any], twin: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's three targets, judged from both passes' figures."""
    allowed = first["traffic_allows_days"]
    return [
        {"target": f"max_clicks bills >= {DELIVERY_MIN} of its budget on each day traffic "
                   f"allows ({allowed} days): days met",
         "value": [first["met_days"], allowed, first["allowed_share"]],
         "met": first["met_days"] == allowed if allowed else None},
        {"target": "no day above budget, either pass (billed > budget or absorbed > 0)",
         "value": first["days_above_budget"] + twin["days_above_budget"],
         "met": not first["days_above_budget"] and not twin["days_above_budget"]},
        {"target": "max_clicks clicks > manual clicks at its average CPC",
         "value": [first["clicks"], twin["clicks"]], "met": first["clicks"] > twin["clicks"]},
    ]


def summary_lines(result: dict[str, Any]) -> list[str]:
    """What ``adfunnel replay --auto-bidding compare`` prints."""
    out = [f"auto-bidding replay ({result['rows'][0]} rows, {result['wall_s']} s): "
           f"{result['design']}",
           f"{'pass':<11} {'bid':>7} {'budget':>7} {'billed':>7} {'share':>6} {'clicks':>6} "
           f"{'avg CPC':>7} {'λ min':>6} {'λ max':>6}  per day billed/budget (clicks)"]
    for name in ("max_clicks", "manual", "ceiling"):
        c = result.get(name)
        if c is None:  # no ceiling pass
            continue
        lam = c["lambda"] or {}
        lo, hi = (("n/a", "n/a") if lam.get("min") is None
                  else (f"{lam['min']:.2f}", f"{lam['max']:.2f}"))
        days = " ".join(f"{d['date'][5:]} {d['billed_micros'] / 1e6:.2f}/"
                        f"{d['budget_micros'] / 1e6:.0f} ({d['clicks']})" for d in c["days"])
        out.append(f"{name:<11} {c['bid_micros'] / 1e6:>7.3f} {c['budget_micros'] / 1e6:>7.1f} "
                   f"{c['billed_micros'] / 1e6:>7.3f} {c['share'] or 0:>6.3f} "
                   f"{c['clicks']:>6} {(c['avg_cpc_micros'] or 0) / 1e6:>7.3f} "
                   f"{lo:>6} {hi:>6}  {days}")
        stops = [f"{d['date'][5:]} at {d.get('last_served') or 'n/a'} with "
                 f"{d['left_micros'] / 1e6:.2f} left" for d in c["days"]
                 if d.get("stopped_below_one_charge")]
        if stops:
            out.append(f"{'':<11} stopped below one click price ({c['bid_micros'] / 1e6:.2f}): "
                       + ", ".join(stops))
    for tg in result["targets"]:
        verdict = "n/a" if tg["met"] is None else ("met" if tg["met"] else "MISSED")
        out.append(f"  [{verdict}] {tg['target']}: {tg['value']}")
    out.append("units: CNY; bid = the cap v (max_clicks) or the manual CPC; share = billed "
               "/ budget over the days served (ledger); λ of its served ads (served log)")
    return out
