"""A campaign's traffic shape restricted to the hours it can serve. Pure.

DESIGN.md §Money and budgets, *Pacing*: the target curve is shaped like the traffic the
campaign can reach. Its eligible-traffic log already holds only requests inside its
dayparts, but the shape a budget day is made from may not (the placement's shape of a
new campaign, a shape logged before a daypart edit, a flat default): a campaign with
three daypart windows (06-09, 12-15, 18-21 local) and an even plan spent most of its
day in the first window and nothing in the last, its curve asking for spend in hours
it could not serve (issue 25). :func:`serving_weights` zeroes the hours outside its
dayparts on the day's weekday, so its curve accrues only where it can serve.
"""

from __future__ import annotations

from collections.abc import Sequence

from adfunnel.campaigns.model import Daypart

HOURS = 24


def serving_hours(dayparts: Sequence[Daypart], weekday: int) -> list[bool]:
    """For each local hour 0-23, whether a campaign with ``dayparts`` may serve in it on
    ``weekday`` (0 = Monday … 6 = Sunday, as :class:`~adfunnel.campaigns.model.Daypart`
    and ``datetime.weekday()``); every hour when there are no dayparts (the rule of
    ``adfunnel.campaigns.schedule.in_daypart``)."""
    if not dayparts:
        return [True] * HOURS
    return [any(weekday in p.weekdays and p.start_hour <= h < p.end_hour for p in dayparts)
            for h in range(HOURS)]


def serving_weights(hourly: Sequence[float], dayparts: Sequence[Daypart],
                    weekday: int) -> list[float]:
    """24 hourly weights for a budget day's curve: ``hourly`` (a traffic shape by local
    wall-clock hour, e.g. ``traffic_log.local_shape``) with the hours outside
    ``dayparts`` on ``weekday`` set to 0.

    - no dayparts: ``hourly`` unchanged (as floats);
    - serving hours whose weights are all 0 (a shape logged elsewhere in the day): 1 in
      every serving hour (a flat curve over the hours it can serve);
    - no serving hour on ``weekday``: all 0 — the day cannot be spent, and an all-zero
      shape is not a curve (``hourly_to_minutely`` refuses it): the caller keeps its
      unrestricted shape for that day.

    ``hourly_to_minutely`` keeps each hour's total, so an hour of weight 0 stays 0 in
    every one of its minutes and the curve is flat outside the dayparts.

    Raises:
        ValueError: ``hourly`` is not 24 finite weights ≥ 0, or ``weekday`` not in 0-6.
    """
    if len(hourly) != HOURS:
        raise ValueError(f"hourly shape needs 24 values, got {len(hourly)}")
    if any(not (0.0 <= float(v) < float("inf")) for v in hourly):
        raise ValueError("hourly weights must be finite and >= 0")
    if not 0 <= weekday <= 6:
        raise ValueError(f"weekday {weekday} not in 0-6")
    w = [float(v) for v in hourly]
    if not dayparts:
        return w
    serve = serving_hours(dayparts, weekday)
    out = [v if s else 0.0 for v, s in zip(w, serve, strict=True)]
    if sum(out) > 0:
        return out
    return [1.0 if s else 0.0 for s in serve]
