"""The control loop: a PI step of every campaign-day's p (and λ of automatic campaigns,
:mod:`adfunnel.budget.multipliers`), and p kept by minute for the next day.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). Every ``control_interval_s`` the controller
(:mod:`adfunnel.pacing.controller`) sets p of evenly paced rows against their target
plans; yesterday's p at the same elapsed minute seeds a new day.
"""

from __future__ import annotations

import math
from datetime import date

import numpy as np

from adfunnel.budget.day_rows import FORGET_AFTER_S, CampaignDay
from adfunnel.budget.rows import NAN, STOPPED
from adfunnel.pacing import controller
from adfunnel.pacing.curve_bank import MAX_MINUTES

#: Charges ahead of its curve a campaign must be before its p may be lowered.
HOLD_BAND_CHARGES = 3
#: Most of its budget the charges of the hold band may stand for. A budget of a few
#: charges (ten $2 clicks) would otherwise have to be 30 % ahead of its curve before p
#: could come down: the day simulation's ``small-budget`` campaign spent a third of its
#: day in its first two hours at p = 1 (hourly curve error 0.40, allowance 0.37).
#: Budgets of 60 charges or more keep the 3-charge band (every decision kept).
HOLD_BAND_MAX_SHARE = 0.05
#: Campaign-days a control step works on at once (its temporaries stay in cache).
STEP_CHUNK = 65_536


def hold_band(spent_since_plan_micros: int, charge: int, budget_micros: int) -> float:
    """How far ahead of its curve a campaign must be before its p may be lowered: the
    noise of its billed spend (3 σ, σ ≈ √(spend × charge) for spend made of charges up
    to ``charge``), at least ``HOLD_BAND_CHARGES`` charges (but no more than
    ``HOLD_BAND_MAX_SHARE`` of the budget), at most 1 % of the budget."""
    sigma3 = 3.0 * math.sqrt(max(0, spent_since_plan_micros) * max(1, charge))
    floor = min(HOLD_BAND_CHARGES * charge, HOLD_BAND_MAX_SHARE * budget_micros)
    return max(floor, min(sigma3, 0.01 * budget_micros))


def hold_bands(spent_since_plan: np.ndarray, charge: np.ndarray,
               budget: np.ndarray) -> np.ndarray:
    """:func:`hold_band` of arrays (micros)."""
    sigma3 = 3.0 * np.sqrt(np.maximum(0, spent_since_plan).astype(np.float64)
                           * np.maximum(1, charge))
    floor = np.minimum(HOLD_BAND_CHARGES * charge, HOLD_BAND_MAX_SHARE * budget)
    return np.maximum(floor, np.minimum(sigma3, 0.01 * budget))


class Control:
    """The control loop of a :class:`~adfunnel.budget.service.BudgetService`."""

    def seed_yesterday(self, campaign_id: int, day: date, p_by_minute: dict[int, float]) -> None:
        """p by elapsed minute of ``day``'s previous day (restart recovery, simulations)."""
        self._yesterday_p[(campaign_id, day)] = dict(p_by_minute)

    def step(self) -> None:
        """One control step for every campaign on its current local day (vectorised)."""
        now = self._now()
        self.steps += 1
        rows = self._roll_over(now)
        self._period_step(rows, now)  # flight and average-day days, re-planned hourly
        t = self._rows
        dt = now - t.last_step_s[rows]
        sel = dt > 0
        rows, dt = rows[sel], dt[sel]
        for row in self._among(rows, self._slices):
            self._expire(row, now)
        for a in range(0, len(rows), STEP_CHUNK):  # temporaries that stay in cache
            self._step_rows(rows[a:a + STEP_CHUNK], dt[a:a + STEP_CHUNK], now)
        if self.on_step is not None:
            for row in rows.tolist():
                self.on_step(CampaignDay(self, row), now)
        if self._first_end < now - FORGET_AFTER_S:
            self._forget_old_days(now)

    def _step_rows(self, rows: np.ndarray, dt: np.ndarray, now: float) -> None:
        t, s = self._rows, self._slots
        rate = t.step_spend[rows] / dt
        ewma = t.rate_ewma[rows]
        ewma = np.where(ewma == 0, rate, 0.5 * ewma + 0.5 * rate)
        t.rate_ewma[rows] = ewma
        t.peak_rate[rows] = np.maximum(t.peak_rate[rows], ewma)
        sl = t.slot[rows]
        even = (t.plan_budget[rows] > 0) & s.even[sl]
        if even.any():
            self._control(rows[even], dt[even], now)
        t.target_last[rows[~even]] = NAN  # uncontrolled: no step's target to keep
        t.rate_measured[rows] |= t.step_charges[rows] > 0
        t.step_spend[rows] = 0
        t.step_charges[rows] = 0
        t.last_step_s[rows] = now
        self._record_p(rows, now)
        paced = s.even[sl] & (t.state[rows] != STOPPED)
        if paced.any():
            low = float(t.p[rows[paced]].min())
            self.p_min = low if self.p_min is None else min(self.p_min, low)
        self._refresh(rows, now)

    def _record_p(self, rows: np.ndarray, now: float) -> None:
        """Note p at this step's elapsed minute of each row's day (the last step of a
        minute wins), for the next day's first p."""
        t = self._rows
        minute = np.floor_divide(now - t.start_s[rows], 60).astype(np.int64)
        for key in np.unique(t.dz[rows] * MAX_MINUTES + minute).tolist():
            d, m = divmod(key, MAX_MINUTES)
            marks = self._step_minutes.get(d)
            if marks is None:
                marks = self._step_minutes[d] = np.zeros(MAX_MINUTES, dtype=bool)
            marks[m] = True
        p = t.p[rows]
        first = t.p_first[rows] < 0
        if first.any():
            t.p_first[rows[first]] = minute[first]
            t.p_const[rows[first]] = p[first]
        hist = t.p_hist[rows]
        moved = (hist < 0) & (p != t.p_const[rows])
        if moved.any():
            # p moved for the first time today: from now on its minutes are kept
            rr = rows[moved]
            idx = self._history.take(len(rr))
            t.p_hist[rr] = idx
            for r, h in zip(rr.tolist(), idx.tolist(), strict=True):
                marks = self._step_minutes[int(t.dz[r])]
                first_m = int(t.p_first[r])
                self._history.data[h, first_m:][marks[first_m:]] = t.p_const[r]
            hist = t.p_hist[rows]
        keep = hist >= 0
        if keep.any():
            self._history.data[hist[keep], minute[keep]] = p[keep]

    def _control(self, rows: np.ndarray, dt: np.ndarray, now: float) -> None:
        """The PI controller of evenly paced rows (``controller.step_arrays``)."""
        t, s = self._rows, self._slots
        start = t.start_s[rows]
        target0 = t.target_last[rows]  # the last step's target, while the plan holds
        unknown = np.isnan(target0)
        if unknown.any():
            r0 = rows[unknown]
            target0[unknown] = self._targets(r0, t.last_step_s[r0] - t.start_s[r0])
        target1 = self._targets(rows, now - start)
        t.target_last[rows] = target1
        target = target1 - target0
        in_fl = np.maximum(0, t.bucket_sum[rows] + t.sl_used[rows] - t.settled_after[rows])
        spent = t.billed[rows] + in_fl
        last = t.last_committed[rows]
        t.last_committed[rows] = spent
        budget = t.plan_budget[rows]
        charge = s.charge[t.slot[rows]]
        p_old = t.p[rows]
        state = controller.ControllerArrays(p_old, t.integral[rows], t.spend_avg[rows],
                                            t.target_avg[rows], t.charges_avg[rows])
        new = controller.step_arrays(
            state, t.step_spend[rows], target, dt, budget_micros=budget,
            charges=t.step_charges[rows], committed_delta_micros=(spent - last).astype(float),
            has_delta=last >= 0, behind_micros=target1 - spent,
            hold_band_micros=hold_bands(spent - t.anchor_spend[rows], charge, budget),
            charge_micros=charge, gains=self.gains)
        t.p[rows], t.integral[rows] = new.p, new.integral
        t.spend_avg[rows], t.target_avg[rows] = new.spend_avg, new.target_avg
        t.charges_avg[rows] = new.charges_avg
        auto = s.auto[t.slot[rows]]
        if auto.any():  # automatic campaigns: λ does the cut, p is the fallback
            self._step_lam(rows[auto], dt[auto], target[auto], (target1 - spent)[auto],
                           p_old[auto], now)

    def _first_p(self, slots: np.ndarray, days: np.ndarray, rows: np.ndarray,
                 now: float) -> np.ndarray:
        """First p of a day: yesterday's p at the elapsed minute nearest to the one of
        ``now`` (the earlier minute on a tie; the seed of ``seed_yesterday`` first), else
        1."""
        p = np.ones(len(rows))
        elapsed = np.maximum(0, np.floor_divide(now - self._rows.start_s[rows], 60)
                             ).astype(np.int64)
        seeded = np.zeros(len(rows), dtype=bool)
        if self._yesterday_p:
            cids = self._slots.cid[slots]
            for i, (cid, d) in enumerate(zip(cids.tolist(), days.tolist(), strict=True)):
                prev = self._yesterday_p.get((cid, date.fromordinal(d)))
                if prev is not None:
                    seeded[i] = True
                    if prev:
                        m = int(elapsed[i])
                        p[i] = prev[min(prev, key=lambda k, m=m: abs(k - m))]
        yrows = self._find_rows(slots, days - 1)
        has = (yrows >= 0) & ~seeded
        t = self._rows
        if has.any():
            ix = np.flatnonzero(has)
            y = yrows[ix]
            stepped = t.p_first[y] >= 0
            hist = t.p_hist[y]
            const = stepped & (hist < 0)
            p[ix[const]] = t.p_const[y[const]]
            moved = np.flatnonzero(stepped & (hist >= 0))
            for a in range(0, len(moved), 4096):
                part = moved[a:a + 4096]
                h = self._history.data[hist[part]]
                dist = np.abs(np.arange(MAX_MINUTES)[None, :] - elapsed[ix[part]][:, None])
                dist = np.where(np.isnan(h), np.iinfo(np.int64).max, dist)
                best = dist.argmin(axis=1)
                p[ix[part]] = h[np.arange(len(part)), best]
        # a day over whose next day exists has given its p: its minutes are let go (one
        # day of minutes is kept per campaign whose p moved)
        y = yrows[yrows >= 0]
        done = y[(t.end_s[y] <= now) & (t.p_hist[y] >= 0)]
        if len(done):
            self._history.release(t.p_hist[done])
            t.p_hist[done] = -1
            t.p_const[done] = NAN
            t.p_first[done] = -1
        return p

    def _p_by_minute(self, row: int) -> dict[int, float]:
        t = self._rows
        first = int(t.p_first[row])
        if first < 0:
            return {}
        h = int(t.p_hist[row])
        if h >= 0:
            v = self._history.data[h]
            return {int(m): float(v[m]) for m in np.flatnonzero(~np.isnan(v))}
        marks = self._step_minutes.get(int(t.dz[row]))
        minutes = [first] if marks is None else np.flatnonzero(marks[first:]) + first
        return {int(m): float(t.p_const[row]) for m in minutes}
