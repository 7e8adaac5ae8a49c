"""The availability forecast judged against traffic it did not see (issue #26):
``adfunnel simulate --scenario forecast``.

Two weeks of the flight simulation's requests (:mod:`adfunnel.sim.flight_supply`: the
iPinYou hour-of-day shape, placements, devices and interests drawn as
:mod:`adfunnel.sim.flight_scenarios` states) go through a real embedded server
(:class:`~adfunnel.sim.flight.FlightRun`: every request also enters the server's request
sample, as ``/v1/ads:select`` does). A guaranteed line on the news placement is booked
from the start for the second week, with a goal of a third of its matching supply there,
beside two accelerated auction fillers. At local midnight of the second week's first day
— a week of history behind it — the check asks ``POST /v1/forecasts`` for each
:data:`CANDIDATES` over the second week, then lets that week run (fresh draws of the same
shape; Berlin's summer time ends inside it, a 25-hour day).

What the forecast is judged by is counted HERE, by the simulation, from the requests it
sent (never from the server's sample, index or allocation): a candidate's **matching**
requests of the second week (its placements and its targeting read by
:func:`adfunnel.sim.potential.matches`), and of them those **left** after the booked
line's delivery (not served to the booked line). Targets (the issue's): the forecast's
``matching_impressions`` within ±20 % of the matching requests sent and
``available_impressions`` within ±20 % of what was left.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from adfunnel.sim.flight import FlightRun
from adfunnel.sim.flight_report import goals_from_supply
from adfunnel.sim.flight_scenarios import PLACEMENTS, USD, FlightScenario, Line
from adfunnel.sim.flight_supply import Req, generate, local_hours, supply_by_day
from adfunnel.sim.potential import matches

#: The first of the two weeks: Berlin leaves summer time on 2026-10-25, day 11.
FIRST_DAY = date(2026, 10, 14)
TIME_ZONE = "Europe/Berlin"
HISTORY_DAYS = 7
#: The targets: |forecast / actual - 1| at most this.
TOLERANCE = 0.20

#: (name, targeting, placements) of the forecasts asked: one that the booked line takes
#: part of, one it takes all of its slots from, one it does not touch.
CANDIDATES: tuple[tuple[str, dict[str, Any] | None, tuple[str, ...]], ...] = (
    ("mobile on news and sports", {"attr": "device_type", "in": ["mobile"]},
     ("news", "sports")),
    ("news", None, ("news",)),
    ("travel fans anywhere", {"attr": "interests", "in": ["travel"]}, ()),
)


def forecast_scenario() -> FlightScenario:
    """Two weeks: the booked guaranteed line in the second, the fillers throughout."""
    second = (HISTORY_DAYS, 2 * HISTORY_DAYS - 1)
    whole = (0, 2 * HISTORY_DAYS - 1)
    return FlightScenario(
        "forecast", FIRST_DAY, 2 * HISTORY_DAYS, TIME_ZONE, (
            Line("booked", "guaranteed", 8 * USD, {"attr": "placement", "in": ["news"]},
                 days=second, goal_of_supply=1 / 3,
                 note="news, second week, goal = 1/3 of its matching supply, $8 CPM"),
            Line("filler-a", "auction", 3 * USD, days=whole, budget_micros=10_000 * USD,
                 pacing="accelerated", judged=False, note="takes what the line leaves"),
            Line("filler-b", "auction", 2_500_000, days=whole, budget_micros=10_000 * USD,
                 pacing="accelerated", judged=False, note="filler-a's runner-up"),
        ),
        requests_per_day=2_000, short_requests_per_day=400, tick_s=300.0, short_tick_s=1800.0,
        notes="a week of history, then the week the forecasts are asked for")


def run_forecast_check(report_path: Path | None = None, seed: int = 0, short: bool = False,
                       progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run the check (module docstring); return (and write to ``report_path`` as JSON)
    its report: per candidate the forecast, the counted actuals, the errors and verdicts."""
    sc = forecast_scenario()
    per_day = sc.short_requests_per_day if short else sc.requests_per_day
    reqs = generate(sc, seed, per_day)
    supply = supply_by_day(sc, sc.lines, reqs)
    goals = goals_from_supply(sc, supply)
    week2 = [sc.first_day + timedelta(days=HISTORY_DAYS + i) for i in range(HISTORY_DAYS)]
    asked_at = local_hours(week2[0], TIME_ZONE)[0][0]
    answers: dict[str, dict[str, Any]] = {}

    def create_placements(api: Any) -> None:  # the operator's, before any traffic
        for pid, _ in PLACEMENTS:
            r = api.post("/v1/placements", json={"id": pid, "name": pid})
            if r.status_code != 201:
                raise RuntimeError(f"POST /v1/placements: {r.status_code} {r.text}")

    def ask(api: Any) -> None:
        for name, targeting, placements in CANDIDATES:
            r = api.post("/v1/forecasts", json={
                "targeting": targeting, "placements": list(placements),
                "flight_start": week2[0].isoformat(), "flight_end": week2[-1].isoformat(),
                "time_zone": TIME_ZONE})
            if r.status_code != 200:
                raise RuntimeError(f"POST /v1/forecasts: {r.status_code} {r.text}")
            answers[name] = r.json()

    run = FlightRun(sc, seed, reqs, goals, budget_scale=per_day / sc.requests_per_day,
                    tick_s=sc.short_tick_s if short else sc.tick_s,
                    hooks=[(0.0, create_placements), (asked_at, ask)]).run(progress)
    booked = run.lines["booked"]
    taken = booked.served_reqs
    results = [_judge(name, targeting, placements, answers[name], reqs, taken, set(week2))
               for name, targeting, placements in CANDIDATES]
    result = {
        "scenario": sc.name, "seed": seed, "short": short, "requests_per_day": per_day,
        "requests": len(reqs), "time_zone": TIME_ZONE,
        "history": [sc.first_day.isoformat(), (week2[0] - timedelta(days=1)).isoformat()],
        "forecast_week": [week2[0].isoformat(), week2[-1].isoformat()],
        "booked_line": {"goal": booked.goal, "served": len(taken),
                        "matching_requests": sum(supply["booked"].values())},
        "candidates": results,
        "targets_met": all(c["matching_met"] and c["available_met"] for c in results),
        "wall_s": run.wall_s,
    }
    if report_path is not None:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(result, indent=1))
    return result


def _judge(name: str, targeting: dict[str, Any] | None, placements: tuple[str, ...],
           answer: dict[str, Any], reqs: list[Req], taken: set[int], week: set[date]
           ) -> dict[str, Any]:
    """One candidate's forecast against what the second week's requests held."""
    matching = left = 0
    for i, r in enumerate(reqs):
        if r.day in week and (not placements or r.placement in placements) \
                and matches(targeting, r.attrs()):
            matching += 1
            left += i not in taken
    f_match, f_avail = answer["matching_impressions"], answer["available_impressions"]
    e_match = None if matching == 0 else round(f_match / matching - 1, 4)
    e_avail = None if left == 0 else round(f_avail / left - 1, 4)
    return {
        "name": name, "targeting": targeting, "placements": list(placements),
        "forecast": {k: answer[k] for k in ("matching_impressions", "available_impressions",
                                            "contending_lines", "basis")},
        "matching_requests_sent": matching, "left_after_booked": left,
        "matching_error": e_match, "available_error": e_avail,
        "matching_met": e_match is not None and abs(e_match) <= TOLERANCE,
        "available_met": e_avail is not None and abs(e_avail) <= TOLERANCE,
    }


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The check's verdicts, one line per candidate."""
    out = [f"forecast week {result['forecast_week'][0]}..{result['forecast_week'][1]} "
           f"({result['time_zone']}), {result['requests']:,} requests; booked line served "
           f"{result['booked_line']['served']:,} (goal {result['booked_line']['goal']:,})"]
    for c in result["candidates"]:
        f = c["forecast"]
        out.append(
            f"{c['name']}: matching {f['matching_impressions']:,} forecast / "
            f"{c['matching_requests_sent']:,} sent ({c['matching_error']:+.1%}, "
            f"{'met' if c['matching_met'] else 'MISSED'}); available "
            f"{f['available_impressions']:,} / {c['left_after_booked']:,} left "
            f"({c['available_error']:+.1%}, {'met' if c['available_met'] else 'MISSED'})")
    return out
