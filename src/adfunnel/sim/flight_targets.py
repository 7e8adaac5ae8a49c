"""The flight simulation's targets (issue #25, "Evidence"), judged on its report.

Each target is one row ``{line, target, value, limit, met}``; ``met`` is None where
it cannot be judged (the server exposes no plan), and a missed target stays missed:
nothing here is tuned to the figures.

- guaranteed: delivered impressions 98-100 % of the (last) goal by flight end; billed
  never above the goal's cost (goal × rate / 1000); every in-flight day within ±15 %
  of that day's plan where the day's supply allows (its matching requests, rendered at
  the scenario's render rate, reach the plan), judged twice: against the server's
  plan (the day's allotment it exposes) and against the simulation's own reference
  plan (:func:`reference_plan`), which the server cannot move: a server whose plan
  collapses (and is then met) passes the first and misses the second. The day of a
  goal edit is judged by neither: its plan changed within it;
- a goal traffic cannot meet: served on at least 98 % of its matching requests that no
  sponsorship filled (sponsorships come first by design; the simulation counts those it
  filled by its own reading of the targeting), the shortfall reported (that it starves
  nobody is the other lines' own targets);
- sponsorship: served / matching requests within ±3 points of its share;
- flight budget: billed >= 98 % of the budget and never above it;
- average daily: no local day billed above 2× the daily budget, no calendar month
  above 30.4× (``daily * 304 // 10``, the contract's rounding).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date
from typing import Any

from adfunnel.sim.flight_scenarios import Line

DELIVERY_MIN = 0.98
DAY_TOLERANCE = 0.15
SHARE_POINTS = 0.03
FLIGHT_BUDGET_MIN = 0.98
#: A goal traffic cannot meet: share of its open matching requests it must be served on
#: ("all that matches", less the renders' and transients' few per cent, as for goals).
ALL_MATCHING_MIN = 0.98


def reference_plan(ln: dict[str, Any], spec: Line, first_day: date) -> dict[str, int | None]:
    """The simulation's own plan of a guaranteed line, impressions by local day: the goal
    spread over the flight in proportion to the matching requests it counted each day
    (the traffic-shaped even plan, from the simulation's supply, not the server's
    forecast). After a goal edit on day index ``e``: the days from ``e`` on share the
    new goal less what was delivered before day ``e``; the edit's own day is not
    planned (None: the goal changed within it)."""
    days = [d for d in ln["days"] if d["in_flight"]]
    goals = [g for _, g in ln["goal_history"]]
    out: dict[str, int | None] = {}
    iso = _edit_day(spec, first_day)
    edit = None if iso is None else date.fromisoformat(iso)
    before = [d for d in days if edit is None or date.fromisoformat(d["day"]) < edit]
    after = [d for d in days if edit is not None and date.fromisoformat(d["day"]) >= edit]
    total = sum(d["matching_requests"] for d in before) + sum(
        d["matching_requests"] for d in after)
    for d in before:
        out[d["day"]] = round(goals[0] * d["matching_requests"] / total) if total else None
    if after:
        left = goals[-1] - sum(d["delivered"] for d in before)
        rest = sum(d["matching_requests"] for d in after)
        for d in after:
            out[d["day"]] = round(left * d["matching_requests"] / rest) if rest else None
        out[after[0]["day"]] = None
    return out


def _row(line: str, target: str, value: object, limit: str, met: bool | None
         ) -> dict[str, Any]:
    return {"line": line, "target": target, "value": value, "limit": limit, "met": met}


def judge(result: dict[str, Any], lines: dict[str, Line]) -> list[dict[str, Any]]:
    """Every target of every judged line of ``result`` (a flight report)."""
    out: list[dict[str, Any]] = []
    render = result["render_rate"]
    first_day = date.fromisoformat(result["week"][0]) if "week" in result else None
    for ln in result["lines"]:
        spec = lines[ln["key"]]
        if not spec.judged:
            continue
        kind = ln["kind"]
        if kind == "guaranteed":
            out += _guaranteed(ln, spec, render, first_day)
        elif kind == "sponsorship":
            share = ln.get("share")
            met = None if share is None else abs(share - spec.share) <= SHARE_POINTS + 1e-12
            out.append(_row(ln["key"], "share of matching requests", share,
                            f"{spec.share} ± {SHARE_POINTS}", met))
        elif kind == "flight":
            budget, billed = ln["budget_micros"], ln["billed_micros"]
            out.append(_row(ln["key"], "flight budget billed", round(billed / budget, 4),
                            f">= {FLIGHT_BUDGET_MIN} and <= 1.0",
                            FLIGHT_BUDGET_MIN * budget <= billed <= budget))
        elif kind == "average_day":
            out += _average_day(ln)
    return out


def _guaranteed(ln: dict[str, Any], spec: Line, render: float, first_day: date | None
                ) -> list[dict[str, Any]]:
    key, goal = ln["key"], ln["goal"]
    out = []
    cost_limit = -(-goal * spec.bid_micros // 1000)  # the per-mille carry rounds up at most
    out.append(_row(key, "billed within the goal's cost (micros)",
                    ln["billed_micros"], f"<= {cost_limit}", ln["billed_micros"] <= cost_limit))
    if spec.goal_of_supply is not None and spec.goal_of_supply > 1.0:
        # what its tier could have: its matching requests less those a sponsorship
        # (served first, by design) filled
        open_ = ln["matching_requests"] - ln.get("matching_filled_by_sponsorship", 0)
        share = ln["served"] / open_ if open_ > 0 else None
        out.append(_row(key, "served on its matching requests no sponsorship filled "
                        "(goal beyond supply)", None if share is None else round(share, 4),
                        f">= {ALL_MATCHING_MIN}; shortfall {ln['shortfall']} of {goal}",
                        None if share is None else share >= ALL_MATCHING_MIN))
        return out
    ratio = ln["delivered"] / goal
    out.append(_row(key, "delivered / goal by flight end", round(ratio, 4),
                    f"{DELIVERY_MIN}-1.0", DELIVERY_MIN <= ratio <= 1.0))
    edited = {_edit_day(spec, first_day)} - {None}
    out.append(_day_row(key, ln["days"], "planned_impressions", render,
                        "worst day |delivered - planned| / planned (server's plan)",
                        skip=edited))
    if first_day is not None:
        ref = reference_plan(ln, spec, first_day)
        for d in ln["days"]:
            d["reference_impressions"] = ref.get(d["day"])
        out.append(_day_row(key, ln["days"], "reference_impressions", render,
                            "worst day |delivered - reference| / reference "
                            "(simulation's plan: goal by counted supply)"))
    return out


def _edit_day(spec: Line, first_day: date | None) -> str | None:
    """The local day (ISO) of the line's goal edit, None without one."""
    if not spec.edits or first_day is None:
        return None
    return date.fromordinal(first_day.toordinal() + spec.edits[0].day).isoformat()


def _day_row(key: str, days: list[dict[str, Any]], field: str, render: float,
             target: str, skip: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """The worst in-flight day's relative gap between delivered and ``field`` (a plan),
    over the days whose plan is positive and whose supply allows it, but ``skip`` (a
    goal edit's own day: the plan read at 01:00 is not the plan the day ended on)."""
    worst: float | None = None
    judged_days = 0
    for d in days:
        plan = d.get(field)
        if not d["in_flight"] or plan is None or plan <= 0 or d["day"] in skip:
            continue
        if d["matching_requests"] * render < plan:  # the day's supply does not allow
            continue
        judged_days += 1
        err = abs(d["delivered"] - plan) / plan
        worst = err if worst is None else max(worst, err)
    return _row(key, target, None if worst is None else round(worst, 4),
                f"<= {DAY_TOLERANCE} ({judged_days} days judged)",
                None if worst is None else worst <= DAY_TOLERANCE)


def _average_day(ln: dict[str, Any]) -> list[dict[str, Any]]:
    key, daily = ln["key"], ln["budget_micros"]
    most = max((d["billed_micros"] for d in ln["days"]), default=0)
    months: dict[str, int] = defaultdict(int)
    for d in ln["days"]:
        months[d["day"][:7]] += d["billed_micros"]
    month_limit = daily * 304 // 10
    top = max(months.values(), default=0)
    return [
        _row(key, "most billed on a local day / daily budget", round(most / daily, 4),
             "<= 2.0", most <= 2 * daily),
        _row(key, "most billed in a calendar month (micros)", top, f"<= {month_limit}",
             top <= month_limit),
    ]
