"""Flight plans and budget periods: what each local day of a campaign may spend. Pure.

DESIGN.md §How ads are sold, *Budget periods*; seed ``004`` (Netflix's pacing: a
budget over a multi-day flight, planned from a traffic forecast, controlled toward the
plan) and seed ``002`` (Google Ads' average daily budget: a day up to 2×, a calendar
month at most 30.4× the daily budget).

A **flight** is cut into hours (:class:`FlightHours`): elapsed hours from local
midnight of ``flight_start`` to 23:30 local of ``flight_end`` (the last one is the half
hour 23:00–23:30, as the day curve ends at 23:30), each with a forecast weight: the
campaign's hour-of-week (168 values) or hour-of-day (24 values) traffic shape at its
local hour, zero outside its dayparts, times the part of the hour inside the flight.
Weights follow the wall clock, so a 23- or 25-hour DST day has 23 or 25 hours.

The **plan** (:class:`FlightPlan`) spreads what was left of the budget when it was made
(``budget − anchor_spent`` at hour ``anchor``) over the hours from there in proportion
to their plan shares: the weights (``even``) or the weights rescaled so the first half
of the flight (by time) carries 60 % (``frontloaded``). An edit (budget, goal, end
date, targeting) or a resumed pause makes a new plan from the spend at that moment, so
the rest of the flight is rescaled and a paused day is made up over the remaining days.

Every hour the rest is **re-planned** (:func:`replan`) from what remains: the plan's
rates times one factor ``(budget − spent) / plan still due``, at most
:data:`CATCH_UP_CAP` (under-delivery is spread over the rest, never more than 1.5× the
plan's rate in any hour) and as low as 0 (over-delivery lowers the rest). The day's
allotment (:func:`day_allotment`) is what was spent today plus what the re-plan gives
the rest of today, within the day ceiling and the flight's remaining money.

**average_day** (:func:`average_day_allotment`): the average plus an even share of the
month's under-spend (or less, after over-spend) over the month's remaining days, at
most 2× the average and what the 30.4× month cap leaves.

Money is integer micros (allotments are floored: never rounded against the advertiser);
rates and shares are floats (control only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import numpy as np

from adfunnel.campaigns.model import BudgetPeriod, Campaign, Daypart
from adfunnel.campaigns.sales import goal_cost_micros
from adfunnel.campaigns.schedule import day_bounds, zone
from adfunnel.pacing.curve import END_MARGIN_MINUTES
from adfunnel.pacing.shape import serving_hours

#: Any hour's re-planned rate is at most this multiple of the plan's rate (catch-up cap).
CATCH_UP_CAP = 1.5
#: Share of the plan the first half of a ``frontloaded`` flight carries.
FRONT_SHARE = 0.6
#: average_day: a local day bills at most this multiple of the average (Google Ads).
AVERAGE_DAY_MAX = 2
#: average_day: a calendar month bills at most daily × MONTH_NUM // MONTH_DEN (30.4×).
MONTH_NUM, MONTH_DEN = 304, 10
HOUR_S = 3600.0
#: A day limit of a flight without a daily ceiling (no day limit), micros.
NO_DAY_CAP = 2**62


def month_cap(daily_micros: int) -> int:
    """The most a calendar month of an average_day campaign bills, micros (30.4 × daily,
    floored; Google Ads' rule, seed ``002``)."""
    return daily_micros * MONTH_NUM // MONTH_DEN


@dataclass(frozen=True, slots=True)
class FlightHours:
    """The hours of a flight as columns of one length ``n``: ``start_s``/``end_s``
    (Unix s), ``day`` (local date ordinal of the hour) and ``weight`` (forecast traffic
    weight: shape × daypart mask × part of the hour in the flight; ≥ 0)."""

    start_s: np.ndarray
    end_s: np.ndarray
    day: np.ndarray
    weight: np.ndarray

    def __len__(self) -> int:
        return len(self.start_s)

    def index_at(self, now_s: float) -> int:
        """The hour that holds ``now_s``: -1 before the flight, ``n`` after it."""
        if not len(self) or now_s < self.start_s[0]:
            return -1
        if now_s >= self.end_s[-1]:
            return len(self)
        return int(np.searchsorted(self.start_s, now_s, side="right")) - 1

    def rest_fraction(self, now_s: float) -> np.ndarray:
        """Per hour, the part of it still ahead at ``now_s`` (1 ahead, 0 past)."""
        span = self.end_s - self.start_s
        return np.clip((self.end_s - now_s) / np.maximum(span, 1e-9), 0.0, 1.0)


def flight_hours(first: date, last: date, tz: str, shape: Sequence[float],
                 dayparts: Sequence[Daypart] = ()) -> FlightHours:
    """The hours of local days ``first``..``last`` in ``tz`` up to 23:30 of ``last``.

    ``shape``: 24 hour-of-day or 168 hour-of-week (Monday 00:00 first) non-negative
    traffic weights of local wall-clock hours (a campaign's shape weighs the hours it has
    not lived yet as the placement does: :mod:`adfunnel.pacing.hour_means`). Where the
    shape has no weight at all, each serving hour weighs 1 (a flat forecast);
    where the dayparts leave no hour, every hour is zero.

    Raises:
        ValueError: a shape of another length, negative or non-finite weights, or
            ``last`` before ``first``.
    """
    w = np.asarray(shape, dtype=np.float64)
    if len(w) not in (24, 168) or not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("shape needs 24 or 168 finite non-negative weights")
    if last < first:
        raise ValueError("flight ends before it starts")
    z = zone(tz)
    t0 = day_bounds(first, tz)[0].timestamp()
    t_end = day_bounds(last, tz)[1].timestamp() - END_MARGIN_MINUTES * 60
    n = math.ceil((t_end - t0) / HOUR_S)
    starts = t0 + HOUR_S * np.arange(n)
    ends = np.minimum(starts + HOUR_S, t_end)
    days = np.zeros(n, dtype=np.int64)
    raw = np.zeros(n)
    serve = np.zeros(n)
    hours = {wd: serving_hours(dayparts, wd) for wd in range(7)}
    for i in range(n):
        # the middle of the hour names its local hour (a half-hour zone's hours too)
        local = datetime.fromtimestamp(float(starts[i]) + 60.0, tz=UTC).astimezone(z)
        days[i] = local.date().toordinal()
        wd, hr = local.weekday(), local.hour
        raw[i] = w[hr] if len(w) == 24 else w[wd * 24 + hr]
        serve[i] = 1.0 if hours[wd][hr] else 0.0
    part = (ends - starts) / HOUR_S
    weight = raw * serve * part
    if weight.sum() <= 0:
        weight = serve * part
    return FlightHours(starts, ends, days, weight)


def local_hour(now_s: float, tz: str) -> int:
    """The local wall-clock hour (0-23) of ``now_s`` in ``tz``."""
    return datetime.fromtimestamp(now_s, tz=UTC).astimezone(zone(tz)).hour


def day_weights(hours: FlightHours, day_ordinal: int, tz: str) -> np.ndarray:
    """The flight's weights of local day ``day_ordinal`` by local hour (24 values; the
    repeated hour of a 25-hour DST day adds up; 0 outside the day's flight hours)."""
    out = np.zeros(24)
    for i in np.flatnonzero(hours.day == day_ordinal).tolist():
        out[local_hour(float(hours.start_s[i]) + 60.0, tz)] += hours.weight[i]
    return out


def rest_drift(have: np.ndarray, want: np.ndarray, hour: int) -> float:
    """How far two 24-hour shapes disagree on the rest of a day from local ``hour``: half
    the L1 distance of their hours ``hour``..23, each normalised to sum 1 (0: the same
    split, 1: disjoint; 1 when only one of them has weight left)."""
    a = np.asarray(have, dtype=np.float64)[hour:]
    b = np.asarray(want, dtype=np.float64)[hour:]
    if a.sum() <= 0 or b.sum() <= 0:
        return 0.0 if a.sum() == b.sum() else 1.0
    return float(0.5 * np.abs(a / a.sum() - b / b.sum()).sum())


def plan_shares(hours: FlightHours, frontloaded: bool = False, *, anchor: int = 0
                ) -> np.ndarray:
    """The plan's share of each hour from hour ``anchor`` on (0 before it; sums to 1
    where any hour from ``anchor`` has weight, else all 0).

    ``frontloaded``: the hours of the flight's first half by time (an hour's middle
    before the flight's middle) carry :data:`FRONT_SHARE` of the whole plan and the rest
    the second; from an anchor past the start, the part of each half still ahead keeps
    its proportion. A half without weight leaves the plan even.
    """
    w = hours.weight.copy()
    w[:max(0, anchor)] = 0.0
    total = w.sum()
    if total <= 0:
        return np.zeros(len(w))
    if not frontloaded:
        return w / total
    mid = 0.5 * (hours.start_s[0] + hours.end_s[-1])
    first = 0.5 * (hours.start_s + hours.end_s) < mid
    full = hours.weight
    a, b = full[first].sum(), full[~first].sum()
    if a <= 0 or b <= 0:
        return w / total
    scaled = np.where(first, w * FRONT_SHARE / a, w * (1.0 - FRONT_SHARE) / b)
    return scaled / scaled.sum()


@dataclass(frozen=True, slots=True)
class FlightPlan:
    """A flight's plan: ``budget`` micros over ``hours``, made at hour ``anchor`` when
    ``anchor_spent`` micros were spent; the rest spread by ``shares``
    (:func:`plan_shares` from ``anchor``)."""

    hours: FlightHours
    budget: int
    anchor: int = 0
    anchor_spent: int = 0
    frontloaded: bool = False

    @property
    def shares(self) -> np.ndarray:
        return plan_shares(self.hours, self.frontloaded, anchor=self.anchor)

    def rates(self) -> np.ndarray:
        """Micros the plan gives each hour (0 before its anchor; they add up to
        ``budget − anchor_spent``, 0 when nothing was left)."""
        return max(0, self.budget - self.anchor_spent) * self.shares

    def target(self, now_s: float) -> float:
        """The plan's cumulative spend at ``now_s`` (micros, float): ``anchor_spent`` plus
        the rates of the hours (and part of an hour) before ``now_s`` from the anchor."""
        done = 1.0 - self.hours.rest_fraction(now_s)
        return self.anchor_spent + float((self.rates() * done).sum())

    def day_planned(self, now_s: float, day_ordinal: int) -> float:
        """Micros the plan gives local day ``day_ordinal`` up to ``now_s`` (float): the
        rates of that day's hours (and part of an hour) before ``now_s``; 0 for a day
        outside the flight or wholly before the anchor. Over every day it adds up to
        ``target(now_s) − anchor_spent``."""
        done = 1.0 - self.hours.rest_fraction(now_s)
        mine = self.hours.day == day_ordinal
        return float((self.rates()[mine] * done[mine]).sum())

    def edited(self, now_s: float, spent: int, *, budget: int | None = None,
               hours: FlightHours | None = None) -> FlightPlan:
        """A new plan from ``now_s`` with ``spent`` micros spent: a new budget, new hours
        (an end date or targeting edit), or the same (a resumed pause)."""
        h = self.hours if hours is None else hours
        at = max(0, min(h.index_at(now_s), len(h)))
        return FlightPlan(h, self.budget if budget is None else budget, at, spent,
                          self.frontloaded)


def replan(plan: FlightPlan, now_s: float, spent: int) -> np.ndarray:
    """Micros per hour for the rest of the flight after ``now_s`` (the part of the
    current hour still ahead, whole hours after; 0 for what is past), with ``spent``
    micros spent so far: the plan's rates × min(:data:`CATCH_UP_CAP`, left ÷ plan still
    due), ≥ 0. Invariants: it adds up to at most ``budget − spent``; no hour gets more
    than 1.5× its plan rate; an hour outside the dayparts gets 0."""
    rates = plan.rates() * plan.hours.rest_fraction(now_s)
    due = float(rates.sum())
    left = plan.budget - spent
    if due <= 0 or left <= 0:
        return np.zeros(len(rates))
    factor = min(CATCH_UP_CAP, left / due)
    out = rates * factor
    total = float(out.sum())
    if total > left:  # float rounding: never plan more than is left
        out *= left / total
    return out


def day_allotment(plan: FlightPlan, now_s: float, spent_total: int, spent_today: int,
                  day_ordinal: int, day_ceiling: int | None = None) -> int:
    """The budget of local day ``day_ordinal`` as known at ``now_s`` (micros, floored):
    what it spent so far (``spent_today``) plus what :func:`replan` gives the rest of
    that day, at most ``day_ceiling`` (None: none) and at most what the flight has
    left on top of today's spend (``budget − spent_total``). 0 outside the flight."""
    rest = replan(plan, now_s, spent_total)
    today = float(rest[plan.hours.day == day_ordinal].sum())
    allot = spent_today + math.floor(today)
    allot = min(allot, spent_today + max(0, plan.budget - spent_total))
    if day_ceiling is not None:
        allot = min(allot, day_ceiling)
    return max(0, allot)


def average_day_allotment(daily: int, days_before: int, days_left: int,
                          month_billed_before: int) -> int:
    """The budget of a local day of an average_day campaign, micros.

    ``days_before``: days of this calendar month before today that the campaign could
    spend on (from its flight start); ``days_left``: the month's days from today on
    (today included, ≥ 1); ``month_billed_before``: billed on this month's earlier days.
    The average plus (average × days before − billed before) ÷ days left — the
    month's under-spend caught up evenly, over-spend taken back — at least 0, at most
    2 × the average and what the month cap leaves (:func:`month_cap`).
    """
    behind = daily * days_before - month_billed_before
    want = daily + behind // max(1, days_left)
    cap = min(AVERAGE_DAY_MAX * daily, month_cap(daily) - month_billed_before)
    return max(0, min(want, cap))


def month_days(day: date) -> tuple[date, date]:
    """First and last local date of ``day``'s calendar month."""
    first = day.replace(day=1)
    nxt = (first + timedelta(days=32)).replace(day=1)
    return first, nxt - timedelta(days=1)


def goal_cost(campaign: Campaign) -> int | None:
    """Money of a guaranteed line's goal, micros (None: no impressions/clicks goal):
    impressions N × bid / 1000 (floored: the per-mille carry bills N impressions at
    most that), clicks N × bid (CONTRACT25). The rule is the sales terms' one
    (:func:`adfunnel.campaigns.sales.goal_cost_micros`): validation and pacing must
    agree on what a goal costs."""
    return goal_cost_micros(campaign)


def flight_money(campaign: Campaign) -> int | None:
    """A flight's money limit, micros: min of its flight budget, its goal's cost and
    its lifetime budget (those it has); None for another period or none of them."""
    if campaign.budget_period is not BudgetPeriod.FLIGHT:
        return campaign.lifetime_budget_micros
    found = [v for v in (campaign.flight_budget_micros, goal_cost(campaign),
                         campaign.lifetime_budget_micros) if v is not None]
    return min(found) if found else None


def day_limit(campaign: Campaign) -> int:
    """What one local day may bill, micros: the daily budget (``day``), 2× it
    (``average_day``), the daily ceiling (``flight`` with a daily budget > 0) or
    :data:`NO_DAY_CAP`."""
    period = campaign.budget_period
    if period is BudgetPeriod.AVERAGE_DAY:
        return AVERAGE_DAY_MAX * campaign.daily_budget_micros
    if period is BudgetPeriod.FLIGHT and campaign.daily_budget_micros <= 0:
        return NO_DAY_CAP
    return campaign.daily_budget_micros


def period_budgets(campaign: Campaign) -> tuple[int, int | None]:
    """(day limit, lifetime limit) of a campaign, micros (None: no lifetime limit): a
    ``day`` campaign's daily and lifetime budgets as ever; else :func:`day_limit` and
    :func:`flight_money` (what a spend gate that holds committed spend itself checks;
    the month limit is the ledger's)."""
    if campaign.budget_period is BudgetPeriod.DAY and campaign.goal is None:
        return campaign.daily_budget_micros, campaign.lifetime_budget_micros
    return day_limit(campaign), flight_money(campaign)
