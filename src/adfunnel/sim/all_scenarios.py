"""Every day-simulation scenario, full day, against the acceptance targets.

Run by ``python -m benchmarks.simulate_all [--jobs 2] [--seed 0] [--json out.json] [--only a,b]``:
a markdown table (worst figure per target per scenario) and, with ``--json``, a summary with
every campaign's figures. The simulation runs the production budget service, controller and
clients (``adfunnel.sim.day``); this module runs the scenarios and judges them.

Targets (DESIGN.md §Money and budgets; the issue's acceptance figures):

- absorbed overspend (read from the simulated ledger): median ≤ 0.1 % of the daily
  budget, max ≤ 1 %; in ``service-restart`` at most one charge for every campaign of
  the restarted shard (charged above budget, the uncapped amount the ledger kept from
  billing, is reported but not a target);
- delivery ≥ 98 % where traffic allows (its potential spend at p = 1, counted from the
  eligible requests the simulation generated, is ≥ 1.05 × its budget) and the
  campaign was not paused for good by its advertiser (its status at the end: stopped);
- hourly |cumulative spend share − target| ≤ 0.05 (paced campaigns whose traffic allows
  and whose budget holds ≥ 100 charges; accelerated campaigns follow no curve and
  report null; a budget of 10 charges is shown apart: its spend moves in 10 % steps);
- a campaign takes part in no auction 30 s after it is exhausted, 1 s after a pause;
- p at its floor for at most one control step.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ABSORBED_MEDIAN_MAX = 0.001
ABSORBED_MAX = 0.01
DELIVERY_MIN = 0.98
CURVE_MAX = 0.05
EXHAUSTED_STOP_S = 30.0
PAUSE_STOP_S = 1.0
FLOOR_STEPS_MAX = 1
RESTART_CHARGES_MAX = 1.0
#: The curve target is judged where one charge is ≤ 1 % of the budget; a budget of a
#: few charges moves in steps of 10 % or more and is reported apart.
MIN_CHARGES_FOR_CURVE = 100


def _run(args: tuple[str, int, str | None]) -> dict[str, Any]:
    from adfunnel.sim.day_report import run_simulation

    name, seed, plots = args
    r = run_simulation(name, None, Path(plots) if plots else None, seed=seed)
    for c in r["campaigns"]:
        c.pop("p_over_time", None)
        c.pop("hourly_curve_error", None)
    return r


def scenario_row(r: dict[str, Any]) -> dict[str, Any]:
    """Worst figure per target over the campaigns of one scenario report."""
    cs = r["campaigns"]
    absorbed = [c["absorbed_share"] for c in cs if c["absorbed_share"] is not None]
    # judged on delivery and curve: traffic allows, and not paused for good by its owner
    allows = [c for c in cs if c["traffic_allows"] and c.get("final_status") != "stopped"]
    curves = [c["max_hourly_curve_error"] for c in allows
              if c["max_hourly_curve_error"] is not None
              and c.get("budget_charges", MIN_CHARGES_FOR_CURVE) >= MIN_CHARGES_FOR_CURVE]
    coarse = [c for c in allows if c["max_hourly_curve_error"] is not None
              and c.get("budget_charges", MIN_CHARGES_FOR_CURVE) < MIN_CHARGES_FOR_CURVE]
    stops = [c["last_auction_after_exhausted_s"] for c in cs
             if c.get("last_auction_after_exhausted_s") is not None]
    pauses = [c["last_auction_after_pause_s"] for c in cs
              if c.get("last_auction_after_pause_s") is not None]
    row = {
        "scenario": r["scenario"],
        "charged_above_max_micros": max(c["charged_above_budget_micros"] for c in cs),
        "absorbed_median": statistics.median(absorbed),
        "absorbed_max": max(absorbed),
        "delivery_min": min((c["delivered_share"] for c in allows), default=None),
        "delivery_min_campaign": min(allows, key=lambda c: c["delivered_share"])["campaign_id"]
        if allows else None,
        "curve_error_max": max(curves, default=None),
        "curve_error_coarse": {c["campaign_id"]: c["max_hourly_curve_error"] for c in coarse},
        "exhausted_stop_max_s": max(stops, default=None),
        "pause_stop_max_s": max(pauses, default=None),
        "floor_steps_max": max(c["max_steps_at_floor"] for c in cs),
        "restart_absorbed_charges_max": _restart_charges(r),
        "wall_s": r["wall_s"],
    }
    row["met"] = targets_met(row)
    return row


def _restart_charges(r: dict[str, Any]) -> float | None:
    """Most absorbed overspend of a restarted shard's campaigns, in charges (None: no
    restart in the scenario)."""
    rs = r.get("restart")
    if not rs:
        return None
    charge = {c["campaign_id"]: c["charge_micros"] for c in r["campaigns"]}
    return max((a / charge[int(cid)] for cid, a in rs["absorbed_micros"].items()), default=0.0)


def targets_met(row: dict[str, Any]) -> dict[str, bool]:
    def le(v: float | None, lim: float) -> bool:
        return v is None or v <= lim + 1e-12

    return {
        "absorbed": le(row["absorbed_median"], ABSORBED_MEDIAN_MAX)
        and le(row["absorbed_max"], ABSORBED_MAX),
        "restart": le(row.get("restart_absorbed_charges_max"), RESTART_CHARGES_MAX),
        "delivery": row["delivery_min"] is None or row["delivery_min"] >= DELIVERY_MIN,
        "curve": le(row["curve_error_max"], CURVE_MAX),
        "stop": le(row["exhausted_stop_max_s"], EXHAUSTED_STOP_S)
        and le(row["pause_stop_max_s"], PAUSE_STOP_S),
        "floor": row["floor_steps_max"] <= FLOOR_STEPS_MAX,
    }


def _coarse(w: dict[str, Any]) -> str:
    items = w.get("curve_error_coarse") or {}
    return "".join(f" (c{k}: {v:.2f}*)" for k, v in items.items())


def _f(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _pct(v: float | None) -> float | None:
    return None if v is None else 100 * v


def scenario_table(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| scenario | absorbed median / max (% of budget) | restart absorbed (charges) "
        "| delivery min (campaign) | curve error max | stop after exhausted / pause (max s) "
        "| steps at p floor (max) | all targets |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w in rows:
        miss = [k for k, ok in w["met"].items() if not ok]
        out.append(
            f"| {w['scenario']} "
            f"| {100 * w['absorbed_median']:.4f} / {100 * w['absorbed_max']:.4f} "
            f"| {_f(w['restart_absorbed_charges_max'], '.2f')} "
            f"| {_f(w['delivery_min'], '.4f')} ({w['delivery_min_campaign'] or 'n/a'}) "
            f"| {_f(w['curve_error_max'], '.4f')}{_coarse(w)} "
            f"| {_f(w['exhausted_stop_max_s'], '.1f')} / {_f(w['pause_stop_max_s'], '.2f')} "
            f"| {w['floor_steps_max']} | {'met' if not miss else 'NOT met: ' + ', '.join(miss)} |"
        )
    return out


def campaign_table(reports: list[dict[str, Any]]) -> list[str]:
    out = [
        "| scenario | campaign | tz | bid | pacing | budget $ | delivered | absorbed % "
        "| charges in budget | potential ÷ budget | traffic allows | status | curve error "
        "| p min | floor steps | after exhausted s | after pause s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        for c in r["campaigns"]:
            out.append(
                f"| {r['scenario']} | {c['campaign_id']} | {c['time_zone']} | {c['bid_type']} "
                f"| {c['pacing_mode']} | {c['daily_budget_micros'] / 1e6:,.0f} "
                f"| {_f(c['delivered_share'], '.4f')} | {_f(_pct(c['absorbed_share']), '.4f')} "
                f"| {c.get('budget_charges', '')} "
                f"| {_f(_ratio(c['potential_micros'], c['window_budget_micros']), '.2f')} "
                f"| {c['traffic_allows']} | {c.get('final_status', '')} "
                f"| {_f(c['max_hourly_curve_error'], '.4f')} | {_f(c['p_min'], '.4f')} "
                f"| {c['max_steps_at_floor']} "
                f"| {_f(c.get('last_auction_after_exhausted_s'), '.1f')} "
                f"| {_f(c.get('last_auction_after_pause_s'), '.2f')} |"
            )
    return out


def run_all(names: list[str], seed: int, plots: str | None,
            jobs: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Run the named scenarios (``jobs`` in parallel processes) and judge them: every
    scenario's report, its row of worst figures with the targets met, and the figures over
    all campaigns of all scenarios (absorbed overspend median and max, shares of the
    budget; ``all_met``)."""
    work = [(n, seed, plots) for n in names]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            reports = list(ex.map(_run, work))
    else:
        reports = [_run(j) for j in work]
    rows = [scenario_row(r) for r in reports]
    absorbed = [c["absorbed_share"] for r in reports for c in r["campaigns"]
                if c["absorbed_share"] is not None]
    overall = {
        "absorbed_median_all": statistics.median(absorbed),
        "absorbed_max_all": max(absorbed),
        "all_met": all(all(w["met"].values()) for w in rows),
    }
    return reports, rows, overall
