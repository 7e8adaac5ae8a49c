"""Budget periods in the budget service: each local day's budget of a flight or
average-day campaign, and curves that follow dayparts and frontloading.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). DESIGN.md §How ads are sold, *Budget periods*.
The service keeps working per campaign-day: slices, states, the controller and the gate
see a day budget as ever. For a campaign of period ``flight`` or ``average_day`` that
budget is the row's *allotment* (the ``allot`` column; -1 for a ``day`` campaign, whose
rows are untouched, bit for bit), made by the pure rules of :mod:`adfunnel.pacing.flight`:

- ``flight``: the day's part of the flight plan (the slot's traffic shape by local hour,
  zero outside its dayparts, over ``flight_start``..23:30 of ``flight_end``), re-planned
  every hour from what the flight has left (its money: ``flight_budget_micros``, the
  goal's cost, the lifetime budget; :func:`~adfunnel.pacing.flight.flight_money`), never
  more than 1.5× the plan's rate in an hour, and never below one charge (the most one
  event bills) while the flight's money has it. The flight's spend is the row's lifetime
  billed before today (the billed feed reads lifetime totals for these campaigns: their
  slot's ``lifetime`` column holds the flight's money) plus today's spend;
- ``average_day``: the average plus the month's under-spend caught up, at most 2× and
  what the 30.4× month cap leaves; the month's earlier days come from the rows seen
  and, once per month, from ``period_days_loader`` (the ledger's day totals).

An hourly re-plan (and one after the day's first billed read) that moves a day's
allotment scales that day's curve to it, keeping its anchor: a day ahead of its curve
stays ahead for the controller. While the flight is ahead of its plan a re-plan may
lower the day's allotment but never raise it (today's overspend would otherwise raise
today's budget by as much, and the controller would never see it). An edit rescales
the rest of the day from the spend committed then
(:meth:`~adfunnel.budget.plans.Plans._rescale`, the budget-edit path). Edits of the
budget, goal, end date, targeting or dayparts, and a resume after a pause, make a new
flight plan from the spend at that moment (the rest rescaled; a paused day is made up
over the remaining days); so do edits of its start, on whose first hour the plan's
anchor counts. A flight's first plan in this service is made the same way, from the
spend when the service first sees it (a line created mid-flight, a restart).

Curves of campaigns with dayparts (any period) or ``frontloaded`` pacing on a day
budget are made from their shape masked to the day's daypart hours (and, frontloaded,
with the first twelve hours carrying 60 %), so a plan never puts spend where the
campaign cannot serve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from adfunnel.budget.rows import DAY_BITS, NAN
from adfunnel.campaigns.model import BudgetPeriod, Campaign, CampaignStatus, PacingMode
from adfunnel.pacing.flight import (
    FRONT_SHARE,
    FlightHours,
    FlightPlan,
    average_day_allotment,
    day_allotment,
    day_weights,
    flight_hours,
    flight_money,
    local_hour,
    month_days,
    rest_drift,
)
from adfunnel.pacing.progress import RECENT_DAYS

#: A re-plan moves a day's allotment only by more than this share of it (or a charge).
REPLAN_TOLERANCE = 0.002
#: A flight day's curve follows its plan's hours once the two disagree on more than
#: this share of the rest of the day (half the L1 distance of the normalised rests).
CURVE_DRIFT = 0.1


@dataclass
class PeriodSlot:
    """What the service keeps of a campaign with a budget period or a shaped curve."""

    campaign: Campaign
    plan: FlightPlan | None = None
    shape: int = -1  # the shape id the plan's hours were made from
    key: tuple[int, ...] = ()  # what the last re-plan saw (hour, row, billed read, edits)
    edits: int = 0
    history: dict[int, int] = field(default_factory=dict)  # day ordinal -> billed
    months_loaded: set[int] = field(default_factory=set)
    masked: dict[tuple[int, int], int] = field(default_factory=dict)
    hours: FlightHours | None = None  # made from ``shape`` and the record ``version``
    version: int = -1
    curve_hours: FlightHours | None = None  # the hours the day's curve was last checked on
    #: the plan was made before the flight's billed spend was read: made again from
    #: the spend once it is (a plan anchored on no spend would call the line ahead)
    provisional: bool = False

    @property
    def period(self) -> BudgetPeriod:
        return self.campaign.budget_period


def special(c: Campaign) -> bool:
    """True for a campaign this part looks after: a budget period other than ``day``,
    dayparts, or frontloaded pacing."""
    return (c.budget_period is not BudgetPeriod.DAY or bool(c.dayparts)
            or c.pacing_mode is PacingMode.FRONTLOADED)


def slot_lifetime(c: Campaign) -> int:
    """The slot's ``lifetime`` column (-1: none): a flight's money, else the lifetime
    budget."""
    money = flight_money(c)
    return -1 if money is None else money


class Periods:
    """Budget periods of a :class:`~adfunnel.budget.service.BudgetService`."""

    #: (campaign id, first, last) -> billed micros by local day (the ledger's day
    #: totals), read once per average-day campaign and month; None: rows seen only
    period_days_loader: Callable[[int, date, date], dict[date, int]] | None = None

    def _period_note(self, slot: int, c: Campaign, now: float) -> None:
        """A campaign record arrived: keep, update or drop its period slot; an edit
        that changes the flight makes a new plan from the spend now; back to ``day``,
        its days' budgets are the daily budget again (the rest of today rescaled)."""
        if c.budget_period is BudgetPeriod.DAY:
            t = self._rows
            for r in self._rows_of_slot(slot):
                if t.allot[r] >= 0:
                    t.allot[r] = -1
                    self._rescale(r, c.daily_budget_micros, now)
        if not special(c):
            self._period.pop(slot, None)
            return
        ps = self._period.get(slot)
        if ps is None:
            self._period[slot] = PeriodSlot(c)
            return
        old, ps.campaign = ps.campaign, c
        # the start too: the plan's anchor is an hour of the flight, and moved with
        # the start it named another (a postponed start's first day planned nothing)
        if (slot_lifetime(old), old.flight_start, old.flight_end, old.targeting,
                old.dayparts, old.goal, old.daily_budget_micros, old.pacing_mode) != (
                slot_lifetime(c), c.flight_start, c.flight_end, c.targeting, c.dayparts,
                c.goal, c.daily_budget_micros, c.pacing_mode) or (
                old.status is not CampaignStatus.ACTIVE and c.status is CampaignStatus.ACTIVE):
            ps.edits += 1
            if ps.plan is not None and c.budget_period is BudgetPeriod.FLIGHT:
                row = self._current_row(slot, now)
                ps.plan = ps.plan.edited(now, self._flight_spent(row),
                                         budget=slot_lifetime(c),
                                         hours=self._hours(slot, ps, force=True))
        if old.dayparts != c.dayparts or old.pacing_mode != c.pacing_mode:
            ps.masked.clear()

    def period_view(self, campaign_id: int, now: float) -> dict[str, object] | None:
        """The period of a flight or average-day campaign as JSON-able fields (None for
        another): ``budget_period``, ``allotment_micros`` (today's budget),
        ``spent_micros`` (the flight's spend so far, billed + in flight) and, for a
        flight, ``budget_micros``, ``planned_micros`` (the plan's cumulative target
        now) and ``planned_days`` (``[{"day", "planned_micros"}]``: what the plan gives
        each of the last :data:`~adfunnel.pacing.progress.RECENT_DAYS` local days up to
        now, today last; a line's recent delivery ratio, :mod:`adfunnel.pacing.progress`)."""
        slot = self._slot_of.get(campaign_id)
        ps = None if slot is None else self._period.get(slot)
        if slot is None or ps is None or ps.period is BudgetPeriod.DAY:
            return None
        row = self._current_row(slot, now)
        out: dict[str, object] = {"budget_period": ps.period.value,
                                  "allotment_micros": int(self._rows.allot[row])}
        if ps.period is BudgetPeriod.FLIGHT:
            out["spent_micros"] = self._flight_spent(row)
            out["budget_micros"] = slot_lifetime(ps.campaign)
            out["planned_micros"] = (None if ps.plan is None
                                     else int(ps.plan.target(now)))
            out["planned_days"] = None if ps.plan is None else [
                {"day": date.fromordinal(d).isoformat(),
                 "planned_micros": int(ps.plan.day_planned(now, d))}
                for d in range(int(self._rows.day[row]) - RECENT_DAYS + 1,
                               int(self._rows.day[row]) + 1)]
        return out

    # -- curves -------------------------------------------------------------------------
    def _period_shapes(self, rows: np.ndarray) -> None:
        """Frontload the shapes of new rows of frontloaded day (and average-day) campaigns
        (their dayparts are already applied: ``Plans._day_shape``)."""
        t = self._rows
        for r in self._of_periods(rows).tolist():
            ps = self._period[int(t.slot[r])]
            c = ps.campaign
            front = (c.pacing_mode is PacingMode.FRONTLOADED
                     and c.budget_period is not BudgetPeriod.FLIGHT)
            if not front:
                continue
            wd = date.fromordinal(int(t.day[r])).weekday()
            key = (int(t.shape[r]), wd)
            sid = ps.masked.get(key)
            if sid is None:
                h = self._bank.shapes.H[key[0]].copy()
                if front and h[:12].sum() > 0 and h[12:].sum() > 0:
                    h[:12] *= FRONT_SHARE / h[:12].sum()
                    h[12:] *= (1 - FRONT_SHARE) / h[12:].sum()
                sid = key[0] if h.sum() <= 0 else int(self._bank.shapes.add(h)[0])
                ps.masked[key] = sid
            t.shape[r] = sid

    # -- allotments ---------------------------------------------------------------------
    def _period_allot(self, rows: np.ndarray, now: float) -> None:
        """The allotment of new rows of period campaigns: their day's plan budget."""
        t = self._rows
        for r in self._of_periods(rows).tolist():
            ps = self._period[int(t.slot[r])]
            if ps.period is BudgetPeriod.DAY:
                continue
            allot = self._allotment(int(t.slot[r]), ps, r, now)
            t.allot[r] = allot
            t.plan_budget[r] = allot
            t.plan_peak_rate[r] = allot * t.peak_share[r]
            ps.key = self._replan_key(ps, r, now)

    def _of_periods(self, rows: np.ndarray) -> np.ndarray:
        """Those of ``rows`` whose campaign has a period slot (vectorised: a catalogue's
        new days are made in bulk, and few campaigns have one)."""
        slots = np.fromiter(self._period, dtype=np.int64, count=len(self._period))
        return rows[np.isin(self._rows.slot[rows], slots)]

    def _period_step(self, rows: np.ndarray, now: float) -> None:
        """Re-plan the current day of each period campaign whose hour, row, billed read
        or record moved since its last re-plan; rescale the day where its allotment
        moved (``rows``: the current rows; only those of period campaigns are visited;
        a row still without an allotment — its campaign became a period one today —
        gets one, as an edit)."""
        if not self._period:
            return
        t = self._rows
        for r in self._of_periods(rows).tolist():
            slot = int(t.slot[r])
            ps = self._period[slot]
            if ps.period is BudgetPeriod.DAY:
                continue
            key = self._replan_key(ps, r, now)
            if key == ps.key:
                continue
            edited = ps.key[-1:] != key[-1:] or t.allot[r] < 0
            ps.key = key
            self._replan_day(slot, ps, r, now, edited)
            self._follow_plan_hours(ps, r, now)

    def _replan_day(self, slot: int, ps: PeriodSlot, r: int, now: float,
                    edited: bool) -> None:
        """Row ``r``'s allotment from the re-planned flight; its curve rescaled."""
        t, s = self._rows, self._slots
        allot = self._allotment(slot, ps, r, now)
        cur = int(t.allot[r])
        if not edited and cur >= 0 and self._flight_ahead(ps, r, now):
            # a day ahead of the flight plan keeps its budget: were its own overspend
            # to raise it, the day's controller would never feel the overspend, and
            # the flight's last day paid for every busy afternoon (~4 % a day)
            allot = min(allot, cur)
        if not edited and abs(allot - cur) <= max(int(s.charge[slot]),
                                                  REPLAN_TOLERANCE * cur):
            return
        t.allot[r] = allot
        if edited:  # the rest of the day from the spend now, as a budget edit
            self._rescale(r, allot, now)
        else:
            # an hourly re-plan keeps the day's anchor: a day ahead of its curve
            # stays ahead in the controller's eyes (a re-anchor would forgive it
            # every hour, and the flight's rest would pay for it)
            t.plan_budget[r] = allot
            t.plan_peak_rate[r] = allot * t.peak_share[r]
            t.target_last[r] = NAN

    def _follow_plan_hours(self, ps: PeriodSlot, r: int, now: float) -> None:
        """A flight day whose curve disagrees with its flight plan's hours on the rest
        of the day (by more than :data:`CURVE_DRIFT` of it) follows the plan's hours from
        now on. Why: the day's curve was made at midnight from the shape then, and a
        young line's shape learns within the day which hours are empty (a trace without
        requests 19:00-23:00: the curve still wanted a fifth of the day there, and the
        controller held back all day while the plan, re-made from the new shape, was
        behind)."""
        hours = ps.hours
        if (ps.period is not BudgetPeriod.FLIGHT or hours is None or ps.curve_hours is hours
                or ps.campaign.pacing_mode is PacingMode.ACCELERATED):
            return
        ps.curve_hours = hours
        t = self._rows
        want = day_weights(hours, int(t.day[r]), ps.campaign.time_zone)
        have = self._bank.shapes.H[int(t.shape[r])]
        hour = local_hour(now, ps.campaign.time_zone)
        if want.sum() <= 0 or rest_drift(have, want, hour) <= CURVE_DRIFT:
            return
        self._apply_shape(r, int(self._bank.shapes.add(want)[0]), now)

    def _flight_ahead(self, ps: PeriodSlot, row: int, now: float) -> bool:
        """Whether a flight's spend is above its plan's cumulative target now."""
        if ps.period is not BudgetPeriod.FLIGHT or ps.plan is None:
            return False
        return self._flight_spent(row) > ps.plan.target(now)

    def _replan_key(self, ps: PeriodSlot, row: int, now: float) -> tuple[int, ...]:
        return (int(now // 3600), row, int(self._rows.billed_read[row]), ps.edits)

    def _allotment(self, slot: int, ps: PeriodSlot, row: int, now: float) -> int:
        t = self._rows
        spent_today = self._spent(row)
        c = ps.campaign
        day = int(t.day[row])
        if ps.period is BudgetPeriod.AVERAGE_DAY:
            return self._average_day(slot, ps, row, day, now)
        money = slot_lifetime(c)
        if money < 0:
            return 0
        ceiling = c.daily_budget_micros if c.daily_budget_micros > 0 else None
        total = self._flight_spent(row)
        if c.pacing_mode is PacingMode.ACCELERATED:
            allot = spent_today + max(0, money - total)
            return allot if ceiling is None else min(allot, ceiling)
        hours = self._hours(slot, ps)
        if ps.plan is None or (ps.provisional and t.billed_read[row]):
            # the first plan of this service starts now from the spend now, as an edit's
            # does: from the flight's start, a line created mid-flight (or one seen
            # anew by a restarted service after a pause) was behind from its first hour
            # and, held to 1.5x the plan's rate, delivered ~75 % of a half-flight
            ps.plan = FlightPlan(hours, money, frontloaded=c.pacing_mode is
                                 PacingMode.FRONTLOADED).edited(now, total)
            ps.provisional = not t.billed_read[row]
        elif ps.plan.budget != money:
            ps.plan = ps.plan.edited(now, total, budget=money, hours=hours)
        elif ps.plan.hours is not hours:
            ps.plan = FlightPlan(hours, ps.plan.budget, ps.plan.anchor, ps.plan.anchor_spent,
                                 ps.plan.frontloaded)
        allot = day_allotment(ps.plan, now, total, spent_today, day, ceiling)
        # at least one charge while the flight has it: a line whose plan gives a day
        # less than one event's price (five $0.50 clicks over a week) admitted nothing
        # until its re-plans had crept above one charge, days into its flight
        least = min(int(self._slots.charge[slot]), spent_today + max(0, money - total))
        return max(allot, least if ceiling is None else min(least, ceiling))

    def _hours(self, slot: int, ps: PeriodSlot, *, force: bool = False) -> FlightHours:
        """The flight's hours from the slot's current traffic shape (made again when the
        shape or the record changed)."""
        sid = int(self._slots.shape[slot])
        sid = sid if sid >= 0 else self._default_sid
        c = ps.campaign
        if not force and ps.hours is not None and ps.shape == sid and ps.version == c.version:
            return ps.hours
        last = c.flight_end if c.flight_end is not None else c.flight_start
        ps.hours = flight_hours(c.flight_start, last, c.time_zone, self._bank.shapes.H[sid],
                                c.dayparts)
        ps.shape, ps.version = sid, c.version
        return ps.hours

    def _spent(self, row: int) -> int:
        """Billed + in flight of a row (what the controller follows), micros."""
        t = self._rows
        return int(t.billed[row]) + max(0, int(t.bucket_sum[row] + t.sl_used[row]
                                               - t.settled_after[row]))

    def _flight_spent(self, row: int) -> int:
        """The flight's spend through ``row``'s day: billed on earlier days (the row's
        lifetime before, or before its billed spend is read, yesterday's row's) + the
        row's spend, micros."""
        t = self._rows
        base = int(t.lifetime_before[row])
        if not t.billed_read[row]:
            cid = int(self._slots.cid[t.slot[row]])
            prev = self._row_of.get(cid << DAY_BITS | (int(t.day[row]) - 1))
            if prev is not None:
                base = max(base, int(t.lifetime_before[prev]) + self._spent(prev))
        return base + self._spent(row)

    def _average_day(self, slot: int, ps: PeriodSlot, row: int, day: int, now: float) -> int:
        c = ps.campaign
        t = self._rows
        first, last = month_days(date.fromordinal(day))
        cid = int(self._slots.cid[slot])
        if self.period_days_loader is not None and first.toordinal() not in ps.months_loaded:
            ps.months_loaded.add(first.toordinal())
            if day > first.toordinal():
                got = self.period_days_loader(cid, first, date.fromordinal(day - 1))
                for d, billed in got.items():
                    k = d.toordinal()
                    ps.history[k] = max(ps.history.get(k, 0), int(billed))
        for r in self._rows_of_slot(slot):
            d = int(t.day[r])
            if d < day:
                ps.history[d] = max(ps.history.get(d, 0), int(t.billed[r]))
        for d in [d for d in ps.history if d < first.toordinal() - 31]:
            del ps.history[d]
        before = sum(v for d, v in ps.history.items() if first.toordinal() <= d < day)
        start = max(first.toordinal(), c.flight_start.toordinal())
        end = last.toordinal() if c.flight_end is None else min(last.toordinal(),
                                                                 c.flight_end.toordinal())
        return average_day_allotment(c.daily_budget_micros, max(0, day - start),
                                     max(1, end - day + 1), before)

