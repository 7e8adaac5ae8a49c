"""Availability forecasts over the API (issue #26)::

    POST /v1/forecasts   200 forecast   (admin: the answer names the booked lines)

Body (a campaign's own shapes)::

    {"targeting": {...} | null, "placements": ["feed", ...], "flight_start": "YYYY-MM-DD",
     "flight_end": "YYYY-MM-DD", "time_zone": "Europe/Paris", "goal": 100000}

``flight_start``..``flight_end`` are local dates in ``time_zone``, end inclusive (the
flight runs from the start's local midnight to the midnight after the end; hours before
the server's now are left out). ``placements`` empty: every placement. ``goal``
(impressions, optional) sets ``goal_fits``. Answer::

    {"matching_impressions": N, "available_impressions": N,
     "contending_lines": [{"campaign_id", "name", "priority", "takes_impressions"}],
     "basis": {"history_days", "sampled_requests", "sample_rate", "from", "to", "slots"},
     "goal_fits": true | false | null, "limits": "..."}

Errors: 422 naming the field (``flight_end`` before ``flight_start``, a flight over 366
days, an unknown time zone, targeting problems by path, a placement neither created
nor in the kept history of requests), 403 for a
role other than admin. The forecast itself is :mod:`adfunnel.forecast.availability`;
:class:`Forecaster` gathers its inputs: the request sample (this process's closed hours
flushed first), the booked lines and what they delivered to date (the ledger).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field, Strict

from adfunnel.api.field_types import LocalDate, TimeZone, _In
from adfunnel.api.pagination import known_query_only
from adfunnel.api.write_bodies import canonical_targeting
from adfunnel.auth.http import require_role
from adfunnel.auth.keys import Role
from adfunnel.billing.ledger import Ledger
from adfunnel.campaigns.errors import NotFound
from adfunnel.campaigns.model import Campaign, CampaignStatus, GoalMetric, Priority
from adfunnel.campaigns.schedule import zone
from adfunnel.campaigns.store import CampaignStore
from adfunnel.clock import Clock
from adfunnel.forecast.availability import BookedLine, Forecast, forecast
from adfunnel.forecast.store import SampleKeeper, hour_floor
from adfunnel.http_errors import validation_error
from adfunnel.targeting.expr import All, Expr, parse_expr

__all__ = ["Forecaster", "make_forecast_router"]

#: Longest flight a forecast covers, days.
MAX_FLIGHT_DAYS = 366
#: What the forecast does not know (the answer's ``limits``; README "Availability forecasts").
LIMITS = ("Projected from a sample of the server's recent ad requests by hour of week "
          "(hour of day under 7 days of history): growth, seasons and holidays are not "
          "foreseen. Booked lines are simulated by targeting, placements, flight and goal "
          "(one impression per request and line); their dayparts, frequency caps, creative "
          "sizes and budgets are not. A click goal is turned into impressions at the "
          "line's click rate to date (the server's prior without clicks yet).")
EVERYONE: Expr = All(())


class ForecastIn(_In):
    """A forecast's question (module doc)."""

    targeting: dict[str, Any] | None = None
    placements: list[Annotated[str, Strict(), Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=1000)
    flight_start: LocalDate
    flight_end: LocalDate
    time_zone: TimeZone
    goal: Annotated[int, Strict(), Field(gt=0, le=10**15)] | None = None


class ContendingLineOut(BaseModel):
    campaign_id: int
    name: str
    priority: str
    takes_impressions: int


class BasisOut(BaseModel):
    #: days of history the forecast stands on (hours lived / 24)
    history_days: float
    #: sampled requests in that history
    sampled_requests: int
    #: sampled requests per request served in it (1.0: every request was kept)
    sample_rate: float
    #: the history: UTC hour starts, ``to`` exclusive
    from_: datetime = Field(serialization_alias="from")
    to: datetime
    #: ``hour_of_week`` (≥ 7 days of history) or ``hour_of_day``
    slots: str


class ForecastOut(BaseModel):
    matching_impressions: int
    available_impressions: int
    contending_lines: list[ContendingLineOut]
    basis: BasisOut
    goal_fits: bool | None
    limits: str


def _midnight(day: date, tz: str) -> datetime:
    return datetime.combine(day, time(), zone(tz))


class Forecaster:
    """Gathers a forecast's inputs and runs it (module doc). ``keeper`` None: no sample
    (every forecast is 0). ``pctr_prior`` turns a click goal into impressions before the
    line has a click of its own."""

    def __init__(self, keeper: SampleKeeper | None, store: CampaignStore, ledger: Ledger,
                 clock: Clock, history_days: int, pctr_prior: float) -> None:
        self.keeper = keeper
        self.store = store
        self.ledger = ledger
        self.clock = clock
        self.history_days = history_days
        self.pctr_prior = pctr_prior

    def knows_placement(self, placement: str) -> bool:
        """A placement the operator created, or one the kept history has requests of
        (requested without being created, as the placement report accepts it)."""
        try:
            self.store.get_placement(placement)
            return True
        except NotFound:
            if self.keeper is None:
                return False
            self.keeper.flush()  # this process's closed hours first
            return self.keeper.store.has_placement(placement)

    def run(self, expr: Expr, start: datetime, end: datetime, tz: str,
            exclude: int | None = None) -> tuple[Forecast, dict[int, BookedLine]]:
        """The forecast of ``expr`` over ``[start, end)`` in zone ``tz``, against every
        booked line but ``exclude``; and the lines by id."""
        now = self.clock.now()
        to = hour_floor(now)
        rows: list[Any] = []
        history_from = to
        if self.keeper is not None:
            self.keeper.flush()
            first = self.keeper.store.first_hour(to - timedelta(days=self.history_days))
            if first is not None and first < to:
                history_from = first
                rows = self.keeper.store.rows(history_from, to, now)
        lines = {b.campaign_id: b for b in self.booked(start, end) if b.campaign_id != exclude}
        found = forecast(rows, expr, start, end, list(lines.values()), zone(tz), now,
                         history_from, to)
        return found, lines

    def booked(self, start: datetime, end: datetime) -> Iterator[BookedLine]:
        """Active and paused sponsorship and guaranteed lines whose flight meets
        ``[start, end)``."""
        after = None
        while True:
            page = self.store.list_campaigns(after=after, limit=500, include_archived=False)
            if not page:
                return
            after = page[-1].id
            for c in page:
                line = self._line(c, start, end)
                if line is not None:
                    yield line

    def _line(self, c: Campaign, start: datetime, end: datetime) -> BookedLine | None:
        if (c.priority is Priority.AUCTION or c.goal is None
                or c.status not in (CampaignStatus.ACTIVE, CampaignStatus.PAUSED)):
            return None
        c_start = _midnight(c.flight_start, c.time_zone)
        c_end = (_midnight(c.flight_end + timedelta(days=1), c.time_zone)
                 if c.flight_end is not None else max(end, c_start))
        if c_start >= end or c_end <= start:
            return None
        expr = parse_expr(json.loads(c.targeting)) if c.targeting else EVERYONE
        if c.priority is Priority.SPONSORSHIP:
            return BookedLine(c.id, c.name, c.priority.value, expr, c_start, c_end,
                              share=float(c.goal.share or 0.0))
        return BookedLine(c.id, c.name, c.priority.value, expr, c_start, c_end,
                          remaining=self.remaining(c))

    def remaining(self, c: Campaign) -> float:
        """Impressions a guaranteed line still has to deliver: its goal less what the
        ledger billed over its flight (a click goal at its click rate to date)."""
        total = c.goal.total if c.goal is not None else None
        if not total:
            return 0.0
        last = c.flight_end or self.clock.now().date()
        days = self.ledger.day_totals(c.id, c.flight_start, max(last, c.flight_start))
        imps = sum(d.impressions for d in days)
        clicks = sum(d.clicks for d in days)
        if c.goal is not None and c.goal.metric is GoalMetric.CLICKS:
            ctr = clicks / imps if clicks > 0 and imps > 0 else self.pctr_prior
            return max(total - clicks, 0) / ctr
        return float(max(total - imps, 0))

    def available_for(self, c: Campaign) -> int | None:
        """Impressions available to the (just booked) guaranteed line ``c`` over its
        flight, the other booked lines taken out; None when ``c`` is no guaranteed line
        with an impression goal and a flight end, or when there is no history to
        forecast from (a new server: no warning rather than "0 available")."""
        if (c.priority is not Priority.GUARANTEED or c.goal is None
                or c.goal.metric is not GoalMetric.IMPRESSIONS or c.flight_end is None):
            return None
        expr = parse_expr(json.loads(c.targeting)) if c.targeting else EVERYONE
        found, _ = self.run(expr, _midnight(c.flight_start, c.time_zone),
                            _midnight(c.flight_end + timedelta(days=1), c.time_zone),
                            c.time_zone, exclude=c.id)
        if not found.basis.sampled_requests:
            return None
        return round(found.available)

    def lines_left_short(self, c: Campaign) -> list[tuple[int, int, int]]:
        """``(campaign id, impressions still needed, impressions available)`` of each
        booked guaranteed line (an impression goal) that the (just booked) sponsorship
        ``c`` leaves short of its goal. A sponsorship is served before every guaranteed
        line, so its own forecast cannot see what it takes from the lines booked before
        it: each line whose flight meets ``c``'s is forecast again with ``c`` booked.
        Empty for another line, or when there is no history to forecast from."""
        if c.priority is not Priority.SPONSORSHIP:
            return []
        out = []
        for g in self._guaranteed_meeting(c):
            available = self.available_for(g)
            needed = round(self.remaining(g))
            if available is not None and needed > available:
                out.append((g.id, needed, available))
        return out

    def _guaranteed_meeting(self, c: Campaign) -> Iterator[Campaign]:
        """Active and paused guaranteed lines with an impression goal whose flight (local
        dates) meets ``c``'s."""
        after = None
        while page := self.store.list_campaigns(after=after, limit=500):
            after = page[-1].id
            for g in page:
                if (g.priority is Priority.GUARANTEED and g.goal is not None
                        and g.goal.metric is GoalMetric.IMPRESSIONS
                        and g.status in (CampaignStatus.ACTIVE, CampaignStatus.PAUSED)
                        and g.flight_end is not None and g.flight_end >= c.flight_start
                        and (c.flight_end is None or g.flight_start <= c.flight_end)):
                    yield g


def make_forecast_router(forecaster: Forecaster) -> APIRouter:
    """``POST /v1/forecasts`` (admin only); the app must install the error handlers."""
    router = APIRouter(tags=["operator"], dependencies=[Depends(require_role(Role.ADMIN)),
                                                        Depends(known_query_only)])

    @router.post("/v1/forecasts", response_model=ForecastOut, response_model_by_alias=True)
    def post_forecast(body: ForecastIn) -> ForecastOut:
        """How many requests matching a targeting are expected over a flight, and how
        many of them the booked sponsorship and guaranteed lines leave to sell."""
        problems: list[tuple[str, str]] = []
        if body.flight_end < body.flight_start:
            problems.append(("flight_end", "must not be before flight_start"))
        elif (body.flight_end - body.flight_start).days >= MAX_FLIGHT_DAYS:
            problems.append(("flight_end", f"a flight of at most {MAX_FLIGHT_DAYS} days"))
        for i, p in enumerate(body.placements):
            if not forecaster.knows_placement(p):
                problems.append((f"placements[{i}]", "no such placement"))
        if problems:
            raise validation_error(*problems)
        expr = (parse_expr(json.loads(canonical_targeting(body.targeting)))
                if body.targeting is not None else EVERYONE)
        if body.placements:
            expr = All((expr, parse_expr({"attr": "placement", "in": body.placements},
                                         "placements")))
        found, lines = forecaster.run(
            expr, _midnight(body.flight_start, body.time_zone),
            _midnight(body.flight_end + timedelta(days=1), body.time_zone), body.time_zone)
        b = found.basis
        contending = [ContendingLineOut(campaign_id=j, name=lines[j].name,
                                        priority=lines[j].priority,
                                        takes_impressions=round(t))
                      for j, t in sorted(found.takes.items(), key=lambda kv: (-kv[1], kv[0]))]
        available = round(found.available)
        return ForecastOut(
            matching_impressions=round(found.matching), available_impressions=available,
            contending_lines=contending,
            basis=BasisOut(history_days=round(b.history_days, 3),
                           sampled_requests=b.sampled_requests,
                           sample_rate=round(b.sample_rate, 6), from_=b.history_from,
                           to=b.history_to,
                           slots="hour_of_week" if b.by_week else "hour_of_day"),
            goal_fits=None if body.goal is None else body.goal <= available,
            limits=LIMITS)

    return router
