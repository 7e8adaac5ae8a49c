"""The day simulation's report: run a scenario on the engine (:mod:`adfunnel.sim.day`)
and judge each campaign from the ledger and the simulation's own record.

Evidence (``_campaign_result``): billed and absorbed overspend are read from the
ledger; ``potential_micros`` (what the campaign would spend at p = 1) is counted from
the eligible requests the simulation generated, independent of any controller;
``committed_shortfall_micros`` is computed from the simulation's own ledger of serves
and the events it sent (``DayBilling._check_committed``), never from production's
billing-window rule or the service's billed figure; a figure that was not measured is
``None``.
"""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidType, PacingMode
from adfunnel.campaigns.schedule import day_bounds
from adfunnel.pacing.controller import P_FLOOR
from adfunnel.pacing.curve import curve_for_day
from adfunnel.sim.day import DaySim
from adfunnel.sim.day_track import RENDER_RATE, Track, mean_expected
from adfunnel.sim.scenarios import SimCampaign, scenarios

#: Traffic allows the budget when the spend reachable at p = 1 is at least this multiple
#: of what the budget asks of the simulated window: 5 % for Poisson noise and for the
#: traffic after 23:30 local, which the target curve leaves unused.
TRAFFIC_ALLOWS_MARGIN = 1.05


def _expected_billed(c: SimCampaign) -> float:
    """Expected billed micros of one won request: its expected cost, for CPM only the
    rendered share (an unrendered impression bills nothing)."""
    exp = mean_expected(c)
    return exp * RENDER_RATE if c.bid_type is BidType.CPM else exp


def potential_micros(eligible: int, c: SimCampaign) -> int:
    """Spend reachable at p = 1: eligible requests × win probability × expected billed
    charge per win, micros (from the traffic generated, not from any controller)."""
    return int(eligible * c.win * _expected_billed(c))


def _window_ask(sim: DaySim, tr: Track, s0: float, s1: float) -> float:
    """What the budget asks of the simulated part [s0, s1) of the day: the budget times
    the share of a curve shaped like the campaign's history that falls in it."""
    c = tr.campaign
    ds, _ = day_bounds(sim.sc.day, c.time_zone)
    curve = curve_for_day(tr.sc.history or sim.shape, sim.sc.day, c.time_zone)
    share = curve.share_at(s1 - ds.timestamp()) - curve.share_at(s0 - ds.timestamp())
    return c.daily_budget_micros * share


def _ledger_day(sim: DaySim, cid: int, d: date) -> tuple[int, int]:
    """(billed, absorbed) micros of ``cid`` on local day ``d``, read from the ledger."""
    totals = sim.ledger.day_totals(cid, d, d)
    if not totals:
        return 0, 0
    return totals[0].billed_micros, totals[0].absorbed_micros


# -- results -------------------------------------------------------------------------------
def _campaign_result(sim: DaySim, tr: Track) -> dict[str, Any]:
    sc = sim.sc
    c = tr.campaign
    d = sc.day
    ds, de = day_bounds(d, c.time_zone)
    s0, s1 = max(ds.timestamp(), sim.start.timestamp()), min(de.timestamp(), sim.end.timestamp())
    budget = c.daily_budget_micros
    billed, absorbed = _ledger_day(sim, c.id, d)
    steps = [s for s in tr.steps if s[5] == d.toordinal()]
    ps = [s[1] for s in steps]
    paced = c.pacing_mode is PacingMode.EVEN
    potential = potential_micros(tr.eligible.get(d, 0), tr.sc)
    ask = _window_ask(sim, tr, s0, s1)
    traffic_allows = ask > 0 and potential >= TRAFFIC_ALLOWS_MARGIN * ask
    # hourly |cumulative spend share - target|
    ev = sorted((t, b) for t, b in tr.spend_events if ds.timestamp() <= t < de.timestamp())
    worst: float | None = None
    hours: list[float] = []
    if steps:
        times = [s[0] for s in steps]
        j = 0
        acc = 0
        h = ds.timestamp() + 3600.0
        while h <= s1 + 1e-6:
            if h > s0 + 1.0:
                while j < len(ev) and ev[j][0] <= h:
                    acc += ev[j][1]
                    j += 1
                k = bisect.bisect_right(times, h) - 1
                if k >= 0:
                    _, _, _, target, bud, _ = steps[k]
                    err = abs(acc - target) / bud if bud else 0.0
                    hours.append(round(err, 4))
                    worst = err if worst is None else max(worst, err)
            else:
                while j < len(ev) and ev[j][0] <= h:
                    acc += ev[j][1]
                    j += 1
            h += 3600.0
    # longest run of control steps at the floor
    run = best = 0
    for p in ps:
        run = run + 1 if 0 < p <= P_FLOOR else 0
        best = max(best, run)
    exhausted_at = None
    for s in steps:
        if s[2] == BudgetState.EXHAUSTED.value:
            if exhausted_at is None:
                exhausted_at = s[0]
        else:
            exhausted_at = None
    svc = sim.service_for(c.id)
    cd = svc.campaign_day(c.id, d)
    final_status = None if cd is None else cd.status.value
    note = None
    if not paced:
        # accelerated delivery follows no curve: an error against one means nothing
        worst, hours = None, []
        note = "accelerated: follows no target curve"
    series = [[round(s[0], 1), round(s[1], 5)] for s in steps[:: max(1, len(steps) // 288)]]
    return {
        "campaign_id": c.id,
        "time_zone": c.time_zone,
        "bid_type": c.bid_type.value,
        "pacing_mode": c.pacing_mode.value,
        "daily_budget_micros": budget,
        "charge_micros": c.max_charge_micros,
        "budget_charges": budget // c.max_charge_micros,
        "billed_micros": billed,
        # the simulation's own sum of the charges it sent (the ledger caps billing at the
        # budget, so billed beyond it is 0 by construction; this is the uncapped amount)
        "charged_micros": tr.charged.get(d, 0),
        "charged_above_budget_micros": max(0, tr.charged.get(d, 0) - budget),
        "absorbed_overspend_micros": absorbed,
        "absorbed_share": absorbed / budget if budget else None,
        # worst (billed + expected cost of serves still able to bill) − committed, as
        # the service held them at a control step; null where not tracked
        "committed_shortfall_micros": tr.committed_shortfall if tr.pending is not None
        else None,
        "delivered_share": billed / budget if budget else None,
        "eligible_requests": tr.eligible.get(d, 0),
        "potential_micros": potential,
        "window_budget_micros": round(ask),
        "traffic_allows": traffic_allows,
        "max_hourly_curve_error": None if worst is None else round(worst, 4),
        "curve_error_note": note,
        "hourly_curve_error": hours,
        "final_status": final_status,
        "p_min": min(ps) if ps else None,
        "max_steps_at_floor": best,
        "exhausted_at": exhausted_at,
        "last_auction_after_exhausted_s": None if tr.after_exhausted_s is None
        else round(tr.after_exhausted_s, 3),
        # last serve of the day relative to the final exhaustion (< 0: it stopped before)
        "last_serve_rel_exhausted_s": None if cd is None or cd.exhausted_at is None
        or d not in tr.last_serve else round(tr.last_serve[d] - cd.exhausted_at, 3),
        "paused": any(pz.campaign_id == c.id for pz in sc.pauses),
        "last_auction_after_pause_s": None if tr.after_pause_s is None
        else round(tr.after_pause_s, 3),
        "serves": tr.serves,
        "day_hours": round((de - ds).total_seconds() / 3600.0, 2),
        "p_over_time": series,
    }


def run_simulation(scenario: str, report_path: Path | None = None, plots_dir: Path | None = None,
                   seed: int = 0, short: bool = False,
                   progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run one scenario; return (and write to ``report_path`` as JSON) its report.

    Args:
        scenario: a name from ``adfunnel.sim.scenarios.scenarios()`` (``baseline``, …).
        report_path: where to write the JSON report (None: don't).
        plots_dir: where to write one PNG per campaign (None: no plots).
        seed: random seed (the run is deterministic for a seed).
        short: run the scenario's short window (seconds of CPU, for tests/CI).
        progress: told ``(simulated seconds done, total)`` once per simulated minute.

    Returns:
        ``{"scenario", "short", "seed", "window", "wall_s", "crash", "campaigns": [...]}``
        with per campaign: ``campaign_id, time_zone, daily_budget_micros, billed_micros,
        charged_micros, charged_above_budget_micros, absorbed_overspend_micros,
        delivered_share,
        traffic_allows, max_hourly_curve_error``, p over time and more.

    Raises:
        KeyError: unknown scenario name.
    """
    all_sc = scenarios()
    if scenario not in all_sc:
        raise KeyError(f"unknown scenario {scenario!r}; known: {', '.join(sorted(all_sc))}")
    sc = all_sc[scenario]
    t = time.perf_counter()
    sim = DaySim(sc, seed, short)
    sim.run(progress)
    wall = time.perf_counter() - t
    result: dict[str, Any] = {
        "scenario": sc.name,
        "short": short,
        "seed": seed,
        "notes": sc.notes,
        "window": [sim.start.isoformat(), sim.end.isoformat()],
        "wall_s": round(wall, 2),
        "crash": None if sim.crashed_at is None else {
            "server": f"sim-{1 % sc.servers}", "at": sim.crashed_at,
            "slices_held": sim.crash_slices},
        "restart": _restart_result(sim),
        "client_stats": [c.stats for c in sim.clients],
        "campaigns": [_campaign_result(sim, tr) for tr in sim.tracks.values()],
    }
    if report_path is not None:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(result, indent=1))
    if plots_dir is not None:
        from adfunnel.sim.plots import plot_campaigns

        plot_campaigns(sim, plots_dir)
    return result


def _restart_result(sim: DaySim) -> dict[str, Any] | None:
    """The shard restart, if any: when, what each of its campaigns had billed then, its
    serves and absorbed overspend (ledger) on the scenario's day since."""
    r = sim.restarted
    if r is None:
        return None
    out = dict(r)
    out["serves_after"] = {cid: sim.tracks[cid].serves - n
                           for cid, n in r["serves_at_restart"].items()}
    out["absorbed_micros"] = {cid: _ledger_day(sim, cid, sim.sc.day)[1]
                              for cid in r["serves_at_restart"]}
    return out


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A human table of a report (what ``adfunnel simulate`` prints)."""
    out = [f"scenario {result['scenario']} ({'short' if result['short'] else 'full day'}, "
           f"{result['wall_s']} s)",
           f"{'id':>4} {'tz':<18} {'budget':>10} {'deliv':>6} {'above':>6} {'absorb%':>8} "
           f"{'allows':>6} {'curve':>6} {'pmin':>7} {'floor':>5} {'exh_s':>6} {'pause_s':>7}"]
    for c in result["campaigns"]:
        out.append(
            f"{c['campaign_id']:>4} {c['time_zone']:<18} {c['daily_budget_micros'] / 1e6:>10.2f} "
            f"{_opt(c['delivered_share'], 3):>6} {c['charged_above_budget_micros']:>6} "
            f"{_opt(_pct(c['absorbed_share']), 4):>8} {c['traffic_allows']!s:>6} "
            f"{_opt(c['max_hourly_curve_error'], 3):>6} {_opt(c['p_min'], 4):>7} "
            f"{c['max_steps_at_floor']:>5} "
            f"{_opt(c['last_auction_after_exhausted_s'], 1):>6} "
            f"{_opt(c['last_auction_after_pause_s'], 2):>7}")
    return out


#: The units of :func:`summary_lines`'s columns, printed under its table.
SUMMARY_UNITS = (
    "units: budget in currency units; deliv = billed / budget (fraction); above = charged "
    "above budget, what the ledger's cap kept from billing (micros); absorb% = absorbed "
    "overspend / budget (%); allows = traffic "
    "could deliver the budget; curve = largest hourly gap to the target curve (fraction "
    "of budget); pmin = lowest pacing p; floor = most control steps in a row at the "
    "floor; exh_s, pause_s = seconds from exhaustion or pause to the campaign's last "
    "auction; n/a = not measured")


def _opt(v: float | None, digits: int) -> str:
    """A figure, or "n/a" where it was not measured."""
    return "n/a" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> float | None:
    return None if v is None else 100 * v
