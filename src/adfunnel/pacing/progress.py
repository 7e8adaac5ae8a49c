"""A guaranteed line's progress against its flight plan, and its projected final
delivery. Pure.

Issue #26 (the dashboard shows a line's progress against its plan). The budget service
plans a flight in money (:class:`~adfunnel.pacing.flight.FlightPlan`, micros); a
guaranteed line pays its contract rate for every goal event, so the plan's money is its
goal events at that rate: ``events = micros × goal_total // goal_cost`` (floored; the
goal's cost itself is floored, :func:`~adfunnel.pacing.flight.goal_cost`, so the whole
goal cost converts back to exactly ``goal_total``; a flight budget below the goal's cost
plans fewer events than the goal).

**Projection rule** (:func:`projected_final`)::

    projected = min(goal, delivered + floor(rest_of_plan × ratio))

- ``rest_of_plan``: the plan's events still ahead (its whole-flight total − planned to
  date, ≥ 0);
- ``ratio``: the recent delivery ratio, the goal events the ledger counted on the last
  :data:`RECENT_DAYS` local days (yesterday and today so far, within the flight) ÷ what
  the plan gave those days up to now; when the plan gave them fewer than
  :data:`MIN_RATIO_EVENTS` events (the flight's first minutes, a plan just re-made: a
  ratio of a few events is noise — a line read 10 minutes into its flight, 1 event
  planned and none yet billed, projected 0 of 500), the ratio of the whole flight to
  date (delivered ÷ planned to date) under the same rule; else 1 (the plan as it
  stands).
- once the flight has ended, the projection is what was delivered.

Limits, stated: the rule extrapolates the recent days as they were; it does not model
the budget service's catch-up (a line behind its plan is re-planned up to 1.5× the plan's
rate, :data:`~adfunnel.pacing.flight.CATCH_UP_CAP`), so for a line behind its plan that
still has supply it is pessimistic, and for a line whose supply ran dry it is right. A
plan re-made by an edit (budget, goal, dates, targeting, a resume) counts from the edit:
the recent days' planned part before it is zero, so for up to a day after an edit the
ratio leans on the days' whole delivery and reads high. Events still in flight (served,
not yet billed) are not delivered yet: the ledger lags the budget service by its
settling delay (seconds).

**State** (:func:`progress_state`), from ``pace`` = delivered ÷ planned to date:
``on_track`` within ±:data:`PACE_BAND` (5 %) of the plan, ``behind`` below, ``ahead``
above; ``not_started`` while nothing is planned yet; after the flight, ``met`` or
``missed`` by the goal.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

#: The local days the recent delivery ratio looks at: yesterday and today so far.
RECENT_DAYS = 2
#: Planned events a delivery ratio needs before it scales the rest of the plan (a
#: Poisson count of 20 is known to about ±22 %).
MIN_RATIO_EVENTS = 20
#: A pace within 1 ± this is on track; below behind, above ahead.
PACE_BAND = 0.05


def events_of_micros(micros: int, goal_total: int, goal_cost: int) -> int:
    """The goal events a plan's ``micros`` buy at the line's contract rate (floored; 0
    when the goal has no cost)."""
    if goal_cost <= 0 or micros <= 0:
        return 0
    return micros * goal_total // goal_cost


def recent_ratio(recent_delivered: int, recent_planned: int, delivered: int,
                 planned_to_date: int) -> float:
    """The delivery ratio the rest of the plan is scaled by (module docstring): recent
    delivered ÷ recent planned when the plan gave the recent days at least
    :data:`MIN_RATIO_EVENTS` events, else delivered ÷ planned to date under the same
    rule, else 1. Always ≥ 0."""
    if recent_planned >= MIN_RATIO_EVENTS:
        return max(0, recent_delivered) / recent_planned
    if planned_to_date >= MIN_RATIO_EVENTS:
        return max(0, delivered) / planned_to_date
    return 1.0


def projected_final(delivered: int, planned_to_date: int, plan_total: int, goal: int,
                    ratio: float, *, ended: bool) -> int:
    """The projected final goal events (module docstring): ``delivered`` once the flight
    ``ended``, else delivered + the plan's rest (``plan_total − planned_to_date``, ≥ 0)
    × ``ratio``; never above ``goal`` nor below ``delivered`` (capped at the goal).
    Invariants: 0 ≤ result ≤ goal; result = min(delivered, goal) when ended."""
    done = max(0, min(delivered, goal))
    if ended:
        return done
    rest = max(0, plan_total - planned_to_date)
    return min(goal, done + math.floor(rest * max(0.0, ratio)))


def progress_state(delivered: int, planned_to_date: int, goal: int, *, ended: bool) -> str:
    """``met``/``missed`` after the flight; ``not_started`` with nothing planned yet;
    else ``behind``/``on_track``/``ahead`` by pace (module docstring)."""
    if ended:
        return "met" if delivered >= goal else "missed"
    if planned_to_date <= 0:
        return "not_started"
    pace = delivered / planned_to_date
    if pace < 1.0 - PACE_BAND:
        return "behind"
    if pace > 1.0 + PACE_BAND:
        return "ahead"
    return "on_track"


@dataclass(frozen=True, slots=True)
class LineProgress:
    """A guaranteed line's progress, in goal events (``metric``: impressions or clicks):
    ``delivered`` (the ledger's goal events to date, up to the goal),
    ``planned_to_date`` (the plan's cumulative target now), ``plan_total`` (the whole
    plan), ``goal``, ``projected_final``, ``pace`` (delivered ÷ planned to date; None
    with nothing planned), ``recent_ratio`` and ``state``."""

    metric: str
    delivered: int
    planned_to_date: int
    plan_total: int
    goal: int
    projected_final: int
    pace: float | None
    recent_ratio: float
    state: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def line_progress(metric: str, delivered: int, planned_to_date: int, plan_total: int,
                  goal: int, recent_delivered: int, recent_planned: int, *,
                  ended: bool) -> LineProgress:
    """The progress of a line from its figures in goal events (module docstring)."""
    done = max(0, min(delivered, goal))
    ratio = recent_ratio(recent_delivered, recent_planned, done, planned_to_date)
    return LineProgress(
        metric=metric, delivered=done, planned_to_date=planned_to_date,
        plan_total=plan_total, goal=goal,
        projected_final=projected_final(done, planned_to_date, plan_total, goal, ratio,
                                        ended=ended),
        pace=None if planned_to_date <= 0 else done / planned_to_date,
        recent_ratio=ratio, state=progress_state(done, planned_to_date, goal, ended=ended))
