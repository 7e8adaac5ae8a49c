"""The flight simulation's report: run a flight scenario twice (with and without its
direct lines) and judge each line by what the simulation counted itself.

Per line and local day: ``planned`` (the server's flight plan, where it exposes one;
else null), ``served`` (the answers the simulation got), ``delivered`` and ``billed``
(the ledger's impressions and micros), ``absorbed`` (the ledger's absorbed micros) and
``matching`` (requests matching the line's targeting and flight, counted by
:mod:`adfunnel.sim.flight_supply`, not by the server). Targets
(:mod:`adfunnel.sim.flight_targets`) are printed with met / MISSED; a target that cannot
be judged (no plan exposed) says so. Nothing is retuned after the fact.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from adfunnel.sim.flight import FlightRun, RunResult
from adfunnel.sim.flight_scenarios import FlightScenario, Line, flight_scenarios
from adfunnel.sim.flight_supply import generate, line_days, local_hours, supply_by_day
from adfunnel.sim.flight_targets import judge

#: Days of the short form (tests/CI): the scenario's first days, flights clamped to them.
SHORT_DAYS = 3
#: A sponsorship's daily budget is this multiple of the most its share of a day's
#: matching requests costs (it is a hard billing limit, not the thing measured).
SPONSORSHIP_BUDGET_HEADROOM = 2.0


def shorten(sc: FlightScenario, days: int = SHORT_DAYS) -> FlightScenario:
    """The scenario's first ``days`` days: flights clamped to them, lines and edits
    beyond them dropped."""
    lines = []
    for ln in sc.lines:
        if ln.days[0] >= days:
            continue
        edits = tuple(e for e in ln.edits if e.day < days)
        lines.append(replace(ln, days=(ln.days[0], min(ln.days[1], days - 1)), edits=edits))
    return replace(sc, days=days, lines=tuple(lines))


def goals_from_supply(sc: FlightScenario, supply: dict[str, dict[date, int]]) -> dict[str, int]:
    """Guaranteed lines' impression goals: their fraction of the matching supply."""
    return {ln.key: max(1, round(ln.goal_of_supply * sum(supply[ln.key].values())))
            for ln in sc.lines if ln.kind == "guaranteed" and ln.goal_of_supply is not None}


def sponsorship_budgets(sc: FlightScenario, supply: dict[str, dict[date, int]]
                        ) -> dict[str, int]:
    """Daily budgets of the sponsorships (:data:`SPONSORSHIP_BUDGET_HEADROOM`)."""
    out = {}
    for ln in sc.lines:
        if ln.kind == "sponsorship":
            most = max(supply[ln.key].values(), default=1)
            cost = most * (ln.share or 1.0) * ln.bid_micros / 1000.0
            out[ln.key] = math.ceil(SPONSORSHIP_BUDGET_HEADROOM * cost)
    return out


def run_flight(scenario: str, report_path: Path | None = None, seed: int = 0,
               short: bool = False, progress: Callable[[int, int], None] | None = None
               ) -> dict[str, Any]:
    """Run flight scenario ``scenario`` with its direct lines and, on the same requests,
    without them; return (and write to ``report_path`` as JSON) the report.

    Raises:
        KeyError: unknown scenario name.
    """
    all_sc = flight_scenarios()
    if scenario not in all_sc:
        raise KeyError(f"unknown flight scenario {scenario!r}; known: {', '.join(all_sc)}")
    sc = shorten(all_sc[scenario]) if short else all_sc[scenario]
    per_day = sc.short_requests_per_day if short else sc.requests_per_day
    reqs = generate(sc, seed, per_day)
    supply = supply_by_day(sc, sc.lines, reqs)
    goals = goals_from_supply(sc, supply)
    kw = dict(budget_scale=per_day / sc.requests_per_day,
              sponsorship_budgets=sponsorship_budgets(sc, supply),
              tick_s=sc.short_tick_s if short else sc.tick_s)
    total = 2 * len(reqs)

    def part(offset: int) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        return lambda done, _n: progress(offset + done, total)

    with_direct = FlightRun(sc, seed, reqs, goals, direct=True, **kw).run(part(0))
    without = FlightRun(sc, seed, reqs, goals, direct=False, **kw).run(part(len(reqs)))
    result = report(sc, seed, short, per_day, supply, with_direct, without)
    if report_path is not None:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(result, indent=1))
    return result


def _line_days(sc: FlightScenario, ln: Line) -> list[date]:
    first, last = line_days(sc, ln)
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def line_result(sc: FlightScenario, ln: Line, run: RunResult,
                supply: dict[date, int]) -> dict[str, Any]:
    """One line's report: per local day of the week its plan (the server's, where
    exposed), serves, the ledger's figures and its matching requests (``supply``), and
    its totals; also the replay's direct lines' (:mod:`adfunnel.sim.replay_direct`)."""
    lr = run.lines[ln.key]
    ledger = run.ledger_days[ln.key]
    days = []
    for d in [sc.first_day + timedelta(days=i) for i in range(sc.days)]:
        t = ledger.get(d)
        matching = supply.get(d, 0)
        served = lr.served.get(d, 0)
        # a sponsorship's day budget is a billing limit, not a plan: it has none
        planned = None if ln.kind == "sponsorship" else run.planned[ln.key].get(d)
        row: dict[str, Any] = {
            "day": d.isoformat(), "hours": len(local_hours(d, sc.time_zone)),
            "in_flight": d in _line_days(sc, ln),
            "planned_micros": planned,
            "planned_impressions": None if planned is None
            else planned * 1000 // ln.bid_micros,
            "matching_requests": matching, "served": served,
            "matching_filled_by_sponsorship": lr.preempted.get(d, 0),
            "delivered": t.impressions if t else 0,
            "billed_micros": t.billed_micros if t else 0,
            "absorbed_micros": t.absorbed_micros if t else 0,
        }
        if ln.kind == "sponsorship":
            row["share"] = round(served / matching, 4) if matching else None
        days.append(row)
    delivered = sum(r["delivered"] for r in days)
    matching = sum(r["matching_requests"] for r in days)
    served = sum(r["served"] for r in days)
    out: dict[str, Any] = {
        "key": ln.key, "label": ln.key, "kind": ln.kind, "campaign_id": lr.campaign_id,
        "note": ln.note,
        "rate_micros": ln.bid_micros, "pacing_mode": ln.pacing,
        "flight": [d.isoformat() for d in line_days(sc, ln)],
        "goal": lr.goal, "goal_history": [[round(t, 1), g] for t, g in lr.goals],
        "share_goal": ln.share, "budget_micros": lr.budget_micros,
        "matching_requests": matching, "served": served, "delivered": delivered,
        "matching_filled_by_sponsorship": sum(r["matching_filled_by_sponsorship"]
                                              for r in days),
        "billed_micros": sum(r["billed_micros"] for r in days),
        "absorbed_micros": sum(r["absorbed_micros"] for r in days),
        "tiers": dict(lr.tiers), "days": days,
    }
    if lr.goal is not None:
        out["goal_cost_micros"] = lr.goal * ln.bid_micros // 1000
        out["over_delivery"] = max(0, delivered - lr.goal)
        out["shortfall"] = max(0, lr.goal - delivered)
    if ln.kind == "sponsorship":
        out["share"] = round(served / matching, 4) if matching else None
    return out


def auction_revenue(sc: FlightScenario, run: RunResult) -> dict[str, Any]:
    """Billed micros of the auction lines, by line and in all, in one run."""
    by_line = {ln.key: sum(t.billed_micros for t in run.ledger_days[ln.key].values())
               for ln in sc.lines if not ln.direct}
    return {"by_line": by_line, "total_micros": sum(by_line.values()),
            "filled_slots": run.filled, "house_slots": run.house, "wall_s": run.wall_s}


def report(sc: FlightScenario, seed: int, short: bool, per_day: int,
           supply: dict[str, dict[date, int]], run: RunResult, base: RunResult
           ) -> dict[str, Any]:
    """The JSON report of a scenario's two runs (module docstring)."""
    lines = [line_result(sc, ln, run, supply[ln.key]) for ln in sc.lines]
    direct_served = sum(ln_["served"] for ln_ in lines if ln_["kind"] in
                        ("guaranteed", "sponsorship"))
    with_direct = auction_revenue(sc, run)
    without = auction_revenue(sc, base)
    plan_exposed = any(v is not None for ln_ in lines for v in
                       (d["planned_micros"] for d in ln_["days"]))
    out: dict[str, Any] = {
        "scenario": sc.name, "short": short, "seed": seed, "notes": sc.notes,
        "time_zone": sc.time_zone,
        "week": [sc.first_day.isoformat(), (sc.first_day + timedelta(days=sc.days - 1))
                 .isoformat()],
        "requests": run.requests, "requests_per_day": per_day,
        "tick_s": sc.short_tick_s if short else sc.tick_s,
        "render_rate": sc.render_rate, "plan_exposed": plan_exposed,
        "lines": lines,
        "auction": {
            "with_direct_lines": with_direct, "without_direct_lines": without,
            "rest_requests": run.requests - direct_served,
            # what the direct lines billed at their contract rates, beside the auction's
            "direct_lines_billed_micros": sum(ln_["billed_micros"] for ln_ in lines
                                              if ln_["kind"] in ("guaranteed", "sponsorship")),
            "revenue_ratio": round(with_direct["total_micros"] / without["total_micros"], 4)
            if without["total_micros"] else None,
        },
        "wall_s": round(run.wall_s + base.wall_s, 2),
    }
    out["targets"] = judge(out, {ln.key: ln for ln in sc.lines})
    return out


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The human summary ``adfunnel simulate --scenario flight`` prints."""
    out = [f"scenario {result['scenario']} ({'short' if result['short'] else 'full week'}, "
           f"{result['requests']} requests, {result['wall_s']} s); time zone "
           f"{result['time_zone']}; server plan exposed: {result['plan_exposed']}",
           f"{'line':<15} {'kind':<12} {'goal/budget':>12} {'match':>7} {'served':>7} "
           f"{'deliv':>7} {'billed $':>10} {'absorb $':>9} {'over':>5} {'share':>6}"]
    for ln in result["lines"]:
        gb = ln["goal"] if ln["goal"] is not None else (
            f"${ln['budget_micros'] / 1e6:,.2f}" if ln["budget_micros"] else "-")
        out.append(
            f"{ln['key']:<15} {ln['kind']:<12} {gb!s:>12} {ln['matching_requests']:>7} "
            f"{ln['served']:>7} {ln['delivered']:>7} {ln['billed_micros'] / 1e6:>10.2f} "
            f"{ln['absorbed_micros'] / 1e6:>9.2f} {ln.get('over_delivery', '-')!s:>5} "
            f"{_opt(ln.get('share')):>6}")
    out.append("per day (local): server's plan / simulation's reference plan (impressions; "
               "- = none) / delivered / matching requests (sponsorship: share served)")
    for ln in result["lines"]:
        if ln["kind"] not in ("guaranteed", "sponsorship"):
            continue
        cells = [f"{d['day'][5:]} {_opt(d['planned_impressions'])}/"
                 f"{_opt(d.get('reference_impressions'))}/{d['delivered']}/"
                 f"{d['matching_requests']}" + (f" ({d['share']})" if "share" in d else "")
                 for d in ln["days"] if d["in_flight"]]
        out.append(f"  {ln['key']:<14} " + "  ".join(cells))
    a = result["auction"]
    out.append(f"auction revenue: ${a['with_direct_lines']['total_micros'] / 1e6:,.2f} with the "
               f"direct lines, ${a['without_direct_lines']['total_micros'] / 1e6:,.2f} without "
               f"(ratio {_opt(a['revenue_ratio'])}); requests left to the auction: "
               f"{a['rest_requests']} of {result['requests']}; the direct lines billed "
               f"${a['direct_lines_billed_micros'] / 1e6:,.2f}")
    out.append("targets:")
    for t in result["targets"]:
        verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "MISSED")
        out.append(f"  [{verdict:>6}] {t['line']}: {t['target']}: {t['value']} ({t['limit']})")
    return out


def _opt(v: object) -> str:
    return "-" if v is None else str(v)

