"""The replay's direct lines (issue #25): a guaranteed line and a sponsorship sold on the
real iPinYou week, created through the API beside the nine auction campaigns, and the
report's ``direct_lines`` section.

The lines (:func:`direct_lines`), as the flight simulation's
:class:`~adfunnel.sim.flight_scenarios.Line` data, on a scenario of the log's local days
(Asia/Shanghai, the nine's zone):

- **guaranteed**: the requests of ad exchange 2 (a third of the log, ~600 a day), from
  the second day to the last (20-25 Oct), at a ¥1.00 CPM contract rate (above the nine's
  CPM bids, ¥0.63-0.93), an impressions goal of a third of its matching supply. It is
  booked (created) at the start of the replay, and its flight starts once the placements
  have a day of history (:data:`GUARANTEED_FIRST_DAY`);
- **sponsorship**: ad exchange 1 (no request of the guaranteed line's) on the third and
  fourth days (21-22 Oct), share 0.5, ¥1.50 CPM, a daily budget of twice the most its
  share of a day's matching requests costs (a billing limit, not what is measured).

Matching supply is counted HERE, before the run, from the rows the replay sends: a row
matches a line when its local day is in the line's flight, its attributes (the ones the
replay sends, read by :func:`adfunnel.sim.potential.row_attributes`) match the line's
targeting by the replay's own reader (:func:`adfunnel.sim.potential.matches`, never the
server's index) and the line has an ad of the slot's size (the ten sizes the nine have).
The reserve price does not apply to direct lines (:mod:`adfunnel.serving.tiers`). The
guaranteed goal is sized from that count (``goals_from_supply``), so a ``--limit`` or
``--every`` run gets a goal of a third of its own supply; a run shorter than a line's
flight clamps it (``shorten``: the sponsorship is dropped from runs of under three days).

Per line and local day the report has (:func:`adfunnel.sim.flight_report.line_result`,
the flight simulation's rows): ``planned`` (the server's plan of the day: the campaign
report's ``period.today.allotment_micros`` read over HTTP at the first move of the
server's clock at or after 01:00 local of the day, as the flight simulation reads it
in process, :func:`adfunnel.sim.flight.capture_times`; null where the report had no
``today`` for that day: a sponsorship, a day before the line was held, a day the clock
jumped over), ``served`` (the answers the replay got), ``delivered`` and
``billed_micros`` (the ledger, read through the campaign report), ``matching_requests``
(counted here) and a sponsorship's ``share`` (served / matching); the targets are
:func:`adfunnel.sim.flight_targets.judge`'s.
Direct lines take their slots before the auction, so the nine campaigns' figures are
those of a week with them.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timedelta
from typing import Any

from adfunnel.billing.model import DayTotals
from adfunnel.sim.flight import LineRun, RunResult, capture_times
from adfunnel.sim.flight_report import (
    goals_from_supply,
    line_result,
    shorten,
    sponsorship_budgets,
)
from adfunnel.sim.flight_scenarios import FlightScenario, Line
from adfunnel.sim.flight_supply import line_days
from adfunnel.sim.flight_targets import judge
from adfunnel.sim.ipinyou import CHINA, LogRow
from adfunnel.sim.potential import matches, row_attributes
from adfunnel.sim.replay_plans import SIZES
from adfunnel.sim.replayer import RENDER_RATE, Replayer

#: The log's week: the lines' flights are day indices into it.
WEEK_DAYS = 7
#: Contract rates, micros per mille (CPM): ¥1.00 and ¥1.50.
GUARANTEED_RATE_MICROS = 1_000_000
SPONSORSHIP_RATE_MICROS = 1_500_000
#: The guaranteed line's first day (an index into the week). A guaranteed deal is sold
#: against its placements' history (the availability forecast is built on it); on the
#: trace's first day the replay's server has none, of any placement, and the trace's days
#: end at 19:00 Shanghai time, which nothing can know before living an evening. A line
#: flighted from that first day planned it over 24 hours and delivered 159 of its 201
#: planned impressions (0.21 under, seed 7: README). From the second day the plan is
#: shaped by the placement's lived hours (:mod:`adfunnel.pacing.hour_means`).
GUARANTEED_FIRST_DAY = 1
#: The guaranteed goal as a fraction of its matching supply over its flight.
GOAL_OF_SUPPLY = 1 / 3
TIME_ZONE = "Asia/Shanghai"


def direct_lines() -> tuple[Line, ...]:
    """The guaranteed line and the sponsorship (module docstring)."""
    return (
        Line("guaranteed-ex2", "guaranteed", GUARANTEED_RATE_MICROS,
             {"attr": "exchange", "in": ["2"]}, days=(GUARANTEED_FIRST_DAY, WEEK_DAYS - 1),
             goal_of_supply=GOAL_OF_SUPPLY,
             note="ad exchange 2, second day to last, goal = 1/3 of its matching supply, "
                  "¥1.00 CPM"),
        Line("sponsorship-ex1", "sponsorship", SPONSORSHIP_RATE_MICROS,
             {"attr": "exchange", "in": ["1"]}, days=(2, 3), share=0.5,
             note="ad exchange 1, share 0.5 on the third and fourth days, ¥1.50 CPM"),
    )


def local_day(row: LogRow) -> date:
    return row.timestamp.astimezone(CHINA).date()


def direct_scenario(rows: list[LogRow]) -> FlightScenario:
    """The lines on the local days ``rows`` span (flights clamped to them).

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("direct lines are sized from log rows: none given")
    first, last = local_day(rows[0]), local_day(rows[-1])
    sc = FlightScenario("replay", first, WEEK_DAYS, TIME_ZONE, direct_lines(),
                        render_rate=RENDER_RATE,
                        notes="the replay's direct lines on the iPinYou week")
    return shorten(sc, min(WEEK_DAYS, (last - first).days + 1))


def direct_supply(sc: FlightScenario, rows: list[LogRow]) -> dict[str, dict[date, int]]:
    """Line key -> local day -> matching rows of ``rows``, counted by the replay
    (module docstring)."""
    out: dict[str, dict[date, int]] = {ln.key: {} for ln in sc.lines}
    spans = {ln.key: line_days(sc, ln) for ln in sc.lines}
    sizes = frozenset(SIZES)
    for row in rows:
        if f"{row.width}x{row.height}" not in sizes:
            continue
        day = local_day(row)
        attrs = row_attributes(row)
        for ln in sc.lines:
            first, last = spans[ln.key]
            if first <= day <= last and matches(ln.targeting, attrs):
                out[ln.key][day] = out[ln.key].get(day, 0) + 1
    return out


class DirectSetup:
    """The direct lines of a replay: their scenario, the supply counted before the run,
    the goals and sponsorship budgets sized from it."""

    def __init__(self, rows: list[LogRow]) -> None:
        self.sc = direct_scenario(rows)
        self.supply = direct_supply(self.sc, rows)
        self.goals = goals_from_supply(self.sc, self.supply)
        self.budgets = sponsorship_budgets(self.sc, self.supply)
        #: (Unix s, local day) still to read, and campaign id -> local day -> the day's
        #: allotment (micros) the server's plan gave it
        self.captures = capture_times(self.sc)
        self.planned: dict[int, dict[date, int]] = defaultdict(dict)

    def create(self, replayer: Replayer) -> None:
        """Create the lines on the replayer's server (:meth:`Replayer.create_direct`) and
        read their plans as its clock moves (:meth:`capture`)."""
        for ln in self.sc.lines:
            replayer.create_direct(self.sc, ln, self.goals.get(ln.key),
                                   self.budgets.get(ln.key))
        replayer.on_clock = lambda now: self.capture(replayer, now)

    def capture(self, replayer: Replayer, now: datetime) -> None:
        """The server's clock moved to ``now``: at the first move at or after 01:00 local
        of a day, each line's ``period.today.allotment_micros`` from its campaign report,
        kept when ``today`` is that day (a move past a whole day reads none of it)."""
        due = []
        while self.captures and self.captures[0][0] <= now.timestamp():
            due.append(self.captures.pop(0)[1])
        if not due:
            return
        for cid in replayer.direct:
            today = _campaign_report(replayer, cid)["period"]["today"]
            if today is not None and date.fromisoformat(today["day"]) in due:
                self.planned[cid][date.fromisoformat(today["day"])] = int(
                    today["allotment_micros"])


def direct_report(replayer: Replayer, setup: DirectSetup) -> dict[str, Any]:
    """The report's ``direct_lines`` (module docstring): the lines' days and totals from
    the campaign reports and the replay's counts, the targets' verdicts, and how the
    goals were sized."""
    sc = setup.sc
    week = [sc.first_day + timedelta(days=i) for i in range(sc.days)]
    run, periods = _read_back(replayer, week, setup.planned)
    ids = {d["line"].key: cid for cid, d in replayer.direct.items()}
    lines = [line_result(sc, ln, run, setup.supply[ln.key]) for ln in sc.lines]
    for ln in lines:
        ln["period"] = periods[ln["key"]]
        # a direct line bills impressions; its clicks (the click model's) are recorded
        ln["clicks"] = sum(t.clicks for t in run.ledger_days[ln["key"]].values())
    result: dict[str, Any] = {
        "time_zone": sc.time_zone,
        "week": [week[0].isoformat(), week[-1].isoformat()],
        "render_rate": RENDER_RATE,
        # the campaign report's period.today: the day's allotment, read at 01:00 local
        "plan_exposed": any(d["planned_micros"] is not None
                            for ln in lines for d in ln["days"]),
        # by the server's campaign id (as everywhere in the report), the line's key its label
        "goal_sizing": {str(ids[k]): {"label": k,
                                      "matching_requests": sum(setup.supply[k].values()),
                                      "goal_of_supply": round(GOAL_OF_SUPPLY, 4), "goal": g}
                        for k, g in setup.goals.items()},
        "lines": lines,
        "totals": {
            "served": sum(ln["served"] for ln in lines),
            "delivered": sum(ln["delivered"] for ln in lines),
            "billed_micros": sum(ln["billed_micros"] for ln in lines),
            "requests": replayer.stats.requests,
        },
        "note": "direct lines take their slots before the auction: the nine campaigns' "
                "figures are those of a week with them",
    }
    result["targets"] = [{"campaign_id": ids[t["line"]], "label": t["line"], **t}
                         for t in judge(result, {ln.key: ln for ln in sc.lines})]
    return result


def _campaign_report(replayer: Replayer, campaign_id: int, week: list[date] | None = None
                     ) -> dict[str, Any]:
    """The campaign's report over ``week`` (None: the server's today)."""
    params = {} if week is None else {"from": week[0].isoformat(),
                                      "to": week[-1].isoformat()}
    r = replayer.http.get(f"/v1/campaigns/{campaign_id}/report", params=params)
    if r.status_code != 200:
        raise RuntimeError(f"campaign {campaign_id} report -> {r.status_code}: {r.text}")
    out: dict[str, Any] = r.json()
    return out


def _read_back(replayer: Replayer, week: list[date], planned_by_id: dict[int, dict[date, int]]
               ) -> tuple[RunResult, dict[str, dict[str, Any]]]:
    """The replay's direct lines as the flight report reads a run (per line its serves
    by local day from the answers received, the ledger's day totals from the campaign
    report, the day's allotment ``planned_by_id`` read during the run), and each line's
    campaign report ``period``."""
    lines: dict[str, LineRun] = {}
    ledger: dict[str, dict[date, DayTotals]] = {}
    periods: dict[str, dict[str, Any]] = {}
    for cid, d in replayer.direct.items():
        ln: Line = d["line"]
        goal = d["goal"]
        lr = LineRun(ln, cid, goal, budget_micros=d["budget_micros"])
        lr.goals = [] if goal is None else [(0.0, goal)]
        lr.served = defaultdict(int, replayer.direct_served.get(cid, {}))
        lines[ln.key] = lr
        rep = _campaign_report(replayer, cid, week)
        periods[ln.key] = rep["period"]
        ledger[ln.key] = {
            date.fromisoformat(x["day"]): DayTotals(
                date.fromisoformat(x["day"]), x["impressions"], x["clicks"],
                x["billed_micros"], x["absorbed_overspend_micros"])
            for x in rep["days"]}
    planned: dict[str, dict[date, int | None]] = {
        k: {d: planned_by_id.get(lr.campaign_id, {}).get(d) for d in week}
        for k, lr in lines.items()}
    s = replayer.stats
    return RunResult(lines, ledger, planned, s.requests, s.filled_slots, 0, 0.0), periods
