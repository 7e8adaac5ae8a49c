"""The flight simulation's engine: a week of requests through a real embedded server on a
manual clock.

One :class:`FlightRun` builds the production runtime (SQLite file, in-process budget
service, memory event log and its aggregator, the ledger) on a
:class:`~adfunnel.clock.ManualClock`, creates the scenario's lines through the HTTP API
(an in-process ASGI client: the same routes and validation as a served API), then for
each generated request (:mod:`adfunnel.sim.flight_supply`) in time order: moves the
clock to the start of the request's tick (a minute; the move runs the budget service's
due jobs), lets the production decider decide
and commit, and fires the impression beacon of a rendered ad through the tracker. Edits
(a goal raised mid-flight) go through ``PATCH /v1/campaigns/{id}``. Before each move of
the clock the aggregator is settled, so the run depends on the seed only.

What the simulation records itself: serves per line and local day (the answers it
got). Delivered impressions, billed and absorbed micros are read from the ledger
afterwards (:mod:`adfunnel.sim.flight_report`).
"""

from __future__ import annotations

import random
import secrets
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from adfunnel.auth.keys import generate_key
from adfunnel.billing.model import DayTotals
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.serving.request import PlacementIn, SelectRequest, SlotIn, UserIn
from adfunnel.sim.flight_scenarios import FlightScenario, Line
from adfunnel.sim.flight_supply import Req, line_days, line_matches, local_hours

#: Deadline given to each decision, ms: generous, so the run depends on the seed only.
DEADLINE_MS = 10_000.0


@dataclass
class LineRun:
    """One line as created on the server and what the simulation saw of it."""

    line: Line
    campaign_id: int
    goal: int | None  # impressions (guaranteed), the last goal set
    goals: list[tuple[float, int]] = field(default_factory=list)  # (when, goal) history
    budget_micros: int | None = None  # flight budget (flight), daily budget (others)
    served: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    # its matching requests a sponsorship filled (the tier served before it)
    preempted: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    tiers: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    version: int = 1
    #: indices (into the run's requests) of the requests it was served on
    served_reqs: set[int] = field(default_factory=set)


@dataclass
class RunResult:
    """What a finished run hands the report: its lines; per line and local day the
    ledger's totals and the plan the server exposed; the requests' count, slots filled
    by campaigns and by house ads, and the wall time."""

    lines: dict[str, LineRun]
    ledger_days: dict[str, dict[date, DayTotals]]
    planned: dict[str, dict[date, int | None]]
    requests: int
    filled: int
    house: int
    wall_s: float


def scaled(micros: int | None, factor: float) -> int | None:
    return None if micros is None else max(1, round(micros * factor))


def campaign_body(sc: FlightScenario, ln: Line, advertiser_id: int, goal: int | None,
                  budget: int | None) -> dict[str, Any]:
    """The ``POST /v1/campaigns`` body of ``ln`` (the #25 contract's fields)."""
    first, last = line_days(sc, ln)
    body: dict[str, Any] = {
        "advertiser_id": advertiser_id, "name": ln.key, "objective": "impressions",
        "bid_type": "CPM", "bid_micros": ln.bid_micros, "time_zone": sc.time_zone,
        "flight_start": first.isoformat(), "flight_end": last.isoformat(),
        "pacing_mode": ln.pacing,
        # the simulation fires /i for a rendered ad: it bills on render
        "billable_event": "rendered",
    }
    if ln.targeting is not None:
        body["targeting"] = ln.targeting
    if ln.kind == "guaranteed":
        body.update(priority="guaranteed", budget_period="flight",
                    goal={"metric": "impressions", "total": goal})
    elif ln.kind == "sponsorship":
        body.update(priority="sponsorship", goal={"metric": "share", "share": ln.share},
                    daily_budget_micros=budget)
    elif ln.kind == "flight":
        body.update(budget_period="flight", flight_budget_micros=budget)
    elif ln.kind == "average_day":
        body.update(budget_period="average_day", daily_budget_micros=budget)
    else:
        body["daily_budget_micros"] = budget
    return body


def capture_times(sc: FlightScenario) -> list[tuple[float, date]]:
    """When to read each local day's plan of ``sc`` (Unix s, the day): 01:00 local (the
    day's first control steps and hourly re-plan have run by then). The replay reads its
    direct lines' plans at these times too (:mod:`adfunnel.sim.replay_direct`)."""
    out = []
    for i in range(sc.days):
        day = sc.first_day + timedelta(days=i)
        out.append((local_hours(day, sc.time_zone)[1][0], day))
    return out


class FlightRun:
    """One run of a scenario (``direct=False``: without its sponsorship and guaranteed
    lines, the auction's comparison run). ``goals``: line key -> impression goal."""

    def __init__(self, sc: FlightScenario, seed: int, reqs: list[Req], goals: dict[str, int],
                 *, budget_scale: float, direct: bool = True, workdir: Path | None = None,
                 sponsorship_budgets: dict[str, int] | None = None,
                 tick_s: float = 60.0,
                 hooks: list[tuple[float, Callable[[Any], None]]] | None = None) -> None:
        self.sc = sc
        self.seed = seed
        self.reqs = reqs
        self.goals = goals
        self.budget_scale = budget_scale
        self.direct = direct
        self.workdir = workdir
        self.sponsorship_budgets = sponsorship_budgets or {}
        self.rng = random.Random(seed + 101)
        # the clock moves in steps of tick_s: the requests of one step are decided at
        # its start (each move runs the budget service's due jobs: reports, the billed
        # feed, a control step; a move per request would cost minutes of CPU a day)
        self.tick_s = tick_s
        #: (Unix s, call): each call gets the API client once the clock reaches its time,
        #: before that tick's requests (the forecast check asks its forecasts so)
        self.hooks = sorted(hooks or [], key=lambda h: h[0])

    def run(self, progress: Callable[[int, int], None] | None = None) -> RunResult:
        import time

        with tempfile.TemporaryDirectory() as tmp:
            work = self.workdir or Path(tmp)
            t = time.perf_counter()
            return self._run(work, progress, t)

    def _run(self, work: Path, progress: Callable[[int, int], None] | None,
             t_start: float) -> RunResult:
        import time

        from fastapi.testclient import TestClient

        from adfunnel.runtime.asgi import build_app
        from adfunnel.runtime.embedded import build_runtime
        from adfunnel.settings import load_settings

        sc = self.sc
        start = datetime.fromtimestamp(local_hours(sc.first_day, sc.time_zone)[0][0], UTC)
        clock = ManualClock(start - timedelta(minutes=10))
        admin = generate_key()
        settings = load_settings(
            database_url=f"sqlite:///{work / 'flight.sqlite3'}", clock="manual",
            token_secret=secrets.token_hex(32), admin_key=admin, seed=self.seed,
            # rollups are not read (the report reads the ledger): refresh them hourly
            rollup_refresh_s=3600.0, ivt=False)
        rt = build_runtime(settings, clock, seed=self.seed, feed=False)
        try:
            with TestClient(build_app(rt), headers={"Authorization": f"Bearer {admin}"}) as api:
                lines = self._create(api)
                edits = sorted(self._edits(lines))
                filled = house = 0
                captures = capture_times(self.sc)
                hooks = list(self.hooks)
                plans: dict[int, dict[date, int]] = defaultdict(dict)
                n = len(self.reqs)
                fired = False
                at_minute = -1.0
                for i, r in enumerate(self.reqs):
                    minute = r.t - r.t % self.tick_s
                    while edits and edits[0][0] <= minute:
                        at, key, goal = edits.pop(0)
                        rt.events.settle()
                        clock.set(datetime.fromtimestamp(at, UTC))
                        self._set_goal(api, lines[key], goal, at)
                    if minute != at_minute:
                        if fired:  # the ledger holds every beacon before time moves on
                            rt.events.settle()
                            fired = False
                        clock.set(datetime.fromtimestamp(minute, UTC))
                        at_minute = minute
                        while captures and captures[0][0] <= minute:
                            _, day = captures.pop(0)
                            _capture_plans(rt, day, plans)
                        while hooks and hooks[0][0] <= minute:
                            rt.events.settle()
                            hooks.pop(0)[1](api)
                    sel = _select(r)
                    if rt.requests is not None:  # the forecast's sample, as /v1/ads:select
                        rt.requests.sampler.record(sel)
                    d = rt.decider.decide(sel, f"r{i}", monotonic_ms() + DEADLINE_MS)
                    rt.decider.commit(d)
                    house += len(d.house)
                    for p in d.placed:
                        filled += 1
                        lr = lines.get(p.campaign.name)
                        if lr is not None:
                            lr.served[r.day] += 1
                            lr.served_reqs.add(i)
                            lr.tiers[str(getattr(p, "tier", None) or "n/a")] += 1
                            if lr.line.kind == "sponsorship":
                                self._preempted(lines, r)
                        if self.rng.random() < sc.render_rate:
                            rt.tracker.impression(p.token)
                            fired = True
                    if progress is not None and i % 500 == 0:
                        progress(i, n)
                # the last day's late events and billed feed
                rt.events.settle()
                end = self.reqs[-1].t if self.reqs else start.timestamp()
                for k in range(1, 13):
                    clock.set(datetime.fromtimestamp(end + 600.0 * k, UTC))
                rt.events.settle()
                ledger_days, planned = self._read_back(rt, lines, plans)
                return RunResult(lines, ledger_days, planned, n, filled, house,
                                 round(time.perf_counter() - t_start, 2))
        finally:
            rt.close()

    def _preempted(self, lines: dict[str, LineRun], r: Req) -> None:
        """A sponsorship filled ``r``: count it against each guaranteed line it matches
        (by the simulation's own reading of the targeting)."""
        for lr in lines.values():
            if lr.line.kind == "guaranteed" and line_matches(self.sc, lr.line, r):
                lr.preempted[r.day] += 1

    def _read_back(self, rt: Any, lines: dict[str, LineRun],
                   plans: dict[int, dict[date, int]]
                   ) -> tuple[dict[str, dict[date, DayTotals]], dict[str, dict[date, int | None]]]:
        """Per line and local day of the week: the ledger's totals and the day's
        allotment the server's budget service gave it (:func:`_capture_plans`; None:
        none exposed)."""
        days = [self.sc.first_day + timedelta(days=i) for i in range(self.sc.days)]
        ledger_days: dict[str, dict[date, DayTotals]] = {}
        planned: dict[str, dict[date, int | None]] = {}
        for key, lr in lines.items():
            totals = rt.ledger.day_totals(lr.campaign_id, days[0], days[-1])
            ledger_days[key] = {t.day: t for t in totals}
            planned[key] = {d: plans.get(lr.campaign_id, {}).get(d) for d in days}
        return ledger_days, planned

    # -- set-up -------------------------------------------------------------------------
    def _create(self, api: Any) -> dict[str, LineRun]:
        out: dict[str, LineRun] = {}
        for ln in self.sc.lines:
            if ln.direct and not self.direct:
                continue
            adv = api.post("/v1/advertisers", json={"name": ln.key})
            _ok(adv, 201)
            goal = self.goals.get(ln.key)
            if ln.kind == "sponsorship":
                budget = self.sponsorship_budgets.get(ln.key)
            else:
                budget = scaled(ln.budget_micros, self.budget_scale)
            body = campaign_body(self.sc, ln, adv.json()["id"], goal, budget)
            r = api.post("/v1/campaigns", json=body)
            _ok(r, 201)
            c = r.json()
            ad = api.post(f"/v1/campaigns/{c['id']}/ads", json={
                "landing_url": f"https://{ln.key}.example/", "creative_ref": f"{ln.key}.png",
                "format": "banner", "width": 300, "height": 250})
            _ok(ad, 201)
            lr = LineRun(ln, c["id"], goal, budget_micros=budget, version=c["version"])
            if goal is not None:
                lr.goals.append((0.0, goal))
            out[ln.key] = lr
        return out

    def _edits(self, lines: dict[str, LineRun]) -> list[tuple[float, str, int]]:
        """(Unix time, line key, new goal) of every goal edit of the created lines."""
        out = []
        for lr in lines.values():
            for e in lr.line.edits:
                day = self.sc.first_day + timedelta(days=e.day)
                t0 = next(t for t, h in local_hours(day, self.sc.time_zone) if h == e.hour)
                assert lr.goal is not None
                out.append((t0, lr.line.key, round(lr.goal * e.factor)))
        return out

    def _set_goal(self, api: Any, lr: LineRun, goal: int, at: float) -> None:
        r = api.patch(f"/v1/campaigns/{lr.campaign_id}", json={
            "goal": {"metric": "impressions", "total": goal}, "version": lr.version})
        _ok(r, 200)
        lr.version = r.json()["version"]
        lr.goal = goal
        lr.goals.append((at, goal))


def _ok(r: Any, status: int) -> None:
    if r.status_code != status:
        raise RuntimeError(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text}")


def _select(r: Req) -> SelectRequest:
    attrs: dict[str, object] = {"device_type": r.device}
    if r.interests:
        attrs["interests"] = list(r.interests)
    return SelectRequest(user=UserIn(key=r.user, attributes=attrs),
                         placement=PlacementIn(id=r.placement),
                         slots=[SlotIn(id="s1", position=1, width=300, height=250)])


def _capture_plans(rt: Any, day: date, plans: dict[int, dict[date, int]]) -> None:
    """The plan the server exposes for local ``day``: each flight or average-day
    campaign's allotment of the day (``period.allotment_micros`` of the budget service's
    ``GET /v1/days/{campaign_id}``: what the hourly re-planned flight gives the day),
    micros. Day-period campaigns have none."""
    proc = rt.gate.process
    now = rt.clock.now().timestamp()
    with proc.lock:
        for cid in proc.service.owned().ids.tolist():
            view = proc.service.period_view(int(cid), now)
            if view is not None:
                plans[int(cid)][day] = int(view["allotment_micros"])
