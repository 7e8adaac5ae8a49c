"""Target plans and curves of campaign-days: traffic shapes, curve sums and targets.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). Curves are followed from 24 hourly weights per
shape (:mod:`adfunnel.pacing.curve_bank`): each row keeps its curve's total weight and a
cursor (a running sum of minute weights) that moves forward as its day goes; shares and
targets equal ``TargetCurve.share_at`` and ``TargetPlan.target_micros`` bit for bit. A
budget edit rescales the rest of the day's plan (:meth:`Plans._rescale`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import numpy as np

from adfunnel.budget.rows import NAN
from adfunnel.pacing.curve import TargetCurve
from adfunnel.pacing.curve_bank import share_from
from adfunnel.pacing.shape import serving_weights

#: Most minutes a curve cursor adds one by one; farther, its sum is made again.
CURSOR_WALK = 16


class Plans:
    """The target plans and curves of a :class:`~adfunnel.budget.service.BudgetService`."""

    def set_traffic_shape(self, campaign_id: int, hourly: Sequence[float]) -> None:
        """Hourly eligible-request shape (24 local hours, last 7 days) for future curves."""
        if len(hourly) != 24:
            raise ValueError("hourly shape needs 24 values")
        sid = int(self._bank.shapes.add(np.array(hourly, dtype=np.float64))[0])
        slot = self._slot_of.get(campaign_id)
        if slot is None:
            self._pending_shapes[campaign_id] = sid
        else:
            unshaped = self._slots.shape[slot] < 0
            self._slots.shape[slot] = sid
            if unshaped:
                self._reshape_defaulted(np.array([slot], dtype=np.int64))
        self._maybe_compact_shapes()

    def set_traffic_shapes(self, campaign_ids: np.ndarray, hourly: np.ndarray,
                           others: Sequence[float] | None = None) -> None:
        """Shapes in bulk: row ``i`` of ``hourly`` (k × 24) for ``campaign_ids[i]``; every
        other campaign known now gets ``others`` (the placement average) when given.
        A campaign added later keeps the default shape until it is given one; a day of
        it made before then takes its first shape from now on (:meth:`_reshape_defaulted`)."""
        unshaped = np.flatnonzero(self._slots.shape[: self._slots.n] < 0)
        if others is not None:
            sid = int(self._bank.shapes.add(np.array(others, dtype=np.float64))[0])
            self._slots.shape[: self._slots.n] = sid
        if len(campaign_ids):
            ids = self._bank.shapes.add(hourly)
            slots = np.array([self._slot_of.get(int(c), -1) for c in campaign_ids.tolist()],
                             dtype=np.int64)
            ok = slots >= 0
            self._slots.shape[slots[ok]] = ids[ok]
            for c, sid2 in zip(campaign_ids[~ok].tolist(), ids[~ok].tolist(), strict=True):
                self._pending_shapes[int(c)] = int(sid2)
        unshaped = unshaped[self._slots.shape[unshaped] >= 0]
        if len(unshaped):
            self._reshape_defaulted(unshaped)
        self._maybe_compact_shapes()

    def _reshape_defaulted(self, slots: np.ndarray) -> None:
        """Days not yet over of ``slots`` (campaigns just given their first shape) that
        were made on the default shape take the slot's shape from now: the rest of the
        day's budget is spread over the rest of the new curve, as a budget edit spreads
        it (:meth:`_rescale`).

        A new campaign's first day was made (by its first billed read or report) before
        the budget process gave it the placement's shape, and kept the default (flat)
        curve all day: where traffic is uneven it fell behind at night and could not make
        it up (a new Asia/Tokyo campaign, traffic ten times denser 09-22, budget half its
        potential: 97 % billed on day 1, 100 % on day 2;
        ``tests/budget/test_new_campaign_shape.py``). A campaign whose days all had a
        shape of its own is never touched."""
        t, now = self._rows, self._now()
        for slot in slots.tolist():
            for row in self._rows_of_slot(slot):
                if t.own_shape[row] or not t.live[row] or t.end_s[row] <= now:
                    continue
                t.own_shape[row] = True
                self._apply_shape(row, self._day_shape(slot, row), now)

    def has_shape(self, campaign_id: int) -> bool:
        """Whether a known campaign was given a traffic shape (else its new days take the
        default)."""
        slot = self._slot_of.get(campaign_id)
        return slot is not None and bool(self._slots.shape[slot] >= 0)

    def _reshape_days(self, slot: int) -> None:
        """The days not yet over of ``slot`` on its shape restricted to its dayparts now
        (a daypart edit), from now on."""
        t, now = self._rows, self._now()
        for row in self._rows_of_slot(slot):
            if t.live[row] and t.end_s[row] > now:
                self._apply_shape(row, self._day_shape(slot, row), now)

    def _day_shape(self, slot: int, row: int) -> int:
        """The shape id of ``row``'s day: its campaign's shape (the default without one)
        restricted to its dayparts on the day's weekday (:func:`serving_weights`; the
        unrestricted shape on a weekday without a serving hour)."""
        base = int(self._slots.shape[slot])
        base = base if base >= 0 else self._default_sid
        dayparts = self._dayparts.get(slot)
        if not dayparts:
            return base
        weekday = date.fromordinal(int(self._rows.day[row])).weekday()
        key = (base, dayparts, weekday)
        sid = self._dp_shapes.get(key)
        if sid is None:
            w = serving_weights(self._bank.shapes.H[base].tolist(), dayparts, weekday)
            sid = int(self._bank.shapes.add(np.array(w))[0]) if sum(w) > 0 else base
            self._dp_shapes[key] = sid
        return sid

    def _apply_shape(self, row: int, sid: int, now: float) -> None:
        """``row`` follows shape ``sid`` from ``now``: its curve's facts made again and,
        once its day has begun, the rest of its plan spread over the rest of the new
        curve (:meth:`_rescale`)."""
        t = self._rows
        if int(t.shape[row]) == sid:
            return
        t.shape[row] = sid
        one = np.array([row])
        self._curve_facts(one)
        if t.start_s[row] <= now:
            self._rescale(row, int(t.plan_budget[row]), now)
        else:  # a day not begun: its whole plan on the new curve
            t.plan_peak_rate[row] = t.plan_budget[row] * t.peak_share[row]
        self._refresh(one, now)

    def _rescale(self, row: int, budget: int, now: float) -> None:
        """A budget edit: the rest of the day's curve from the spend committed now."""
        t = self._rows
        self._lapse(now)
        in_fl = max(0, int(t.bucket_sum[row] + t.sl_used[row] - t.settled_after[row]))
        spent = int(t.billed[row]) + in_fl
        at = now - float(t.start_s[row])
        one = np.array([row])
        t.plan_budget[row] = budget
        t.anchor_s[row] = at
        t.anchor_spend[row] = spent + int(t.sl_open[row])
        t.plan_ca[row] = self._shares(one, np.array([at]))[0]
        t.plan_peak_rate[row] = budget * t.peak_share[row]
        t.integral[row], t.spend_avg[row], t.target_avg[row], t.charges_avg[row] = 0, -1, -1, -1
        t.target_last[row] = NAN
        t.last_committed[row] = spent

    # -- curves -------------------------------------------------------------------------
    def _curve(self, shape_id: int, dz: int) -> TargetCurve:
        key = (shape_id, dz)
        c = self._curves.get(key)
        if c is None:
            if len(self._curves) > 256:
                self._curves.clear()
            c = self._curves[key] = self._bank.curve(shape_id, dz)
        return c

    def _acc_at(self, rows: np.ndarray, minute: np.ndarray) -> np.ndarray:
        """The weights of elapsed minutes ``[0, minute)`` of each row's day added in
        order (``build_curve``'s running sum). Each row's cursor moves forward from
        where the last call left it, minute by minute; a row asked for an earlier
        minute, or more than ``CURSOR_WALK`` minutes ahead, has its sum made again from
        its day's facts (once per distinct shape, day-zone and minute). ``rows`` unique;
        ``minute`` below each row's end minute."""
        t = self._rows
        lag = minute - t.cur_m[rows]
        far = (lag < 0) | (lag > CURSOR_WALK)
        if far.any():
            self._place_cursors(rows[far], minute[far])
            lag[far] = 0
        todo = np.flatnonzero(lag > 0)
        while len(todo):
            rr = rows[todo]
            m = t.cur_m[rr]
            t.cur_acc[rr] += self._bank.weights(t.shape[rr], t.dz[rr], m, t.flat[rr])
            t.cur_m[rr] = m + 1
            lag[todo] -= 1
            todo = todo[lag[todo] > 0]
        return t.cur_acc[rows]

    def _place_cursors(self, rows: np.ndarray, minute: np.ndarray) -> None:
        """Put each row's cursor at ``minute`` (its running sum from the day's facts)."""
        t = self._rows
        key = (t.shape[rows] << 35) | (t.dz[rows] << 11) | minute
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        facts = self._bank.facts(t.shape[rows][first], t.dz[rows][first], minute[first])
        t.cur_m[rows] = minute
        t.cur_acc[rows] = facts.acc[inv]

    def _shares(self, rows: np.ndarray, elapsed_s: np.ndarray) -> np.ndarray:
        """``TargetCurve.share_at(elapsed_s)`` of each row's curve, bit for bit (rows
        unique)."""
        t, z = self._rows, self._bank.zones
        e = np.asarray(elapsed_s, dtype=np.float64)
        dz = t.dz[rows]
        n, end = z.minutes[dz], z.end_minute[dz]
        x = e / 60.0
        i = np.where(e > 0, np.floor(np.maximum(x, 0.0)), 0).astype(np.int64)
        f = x - i
        acc = np.zeros(len(rows))
        w = np.zeros(len(rows))
        need = np.flatnonzero((e > 0) & (i < end))
        if len(need):
            rr, ii = rows[need], i[need]
            acc[need] = self._acc_at(rr, ii)
            inner = ii + 1 < end[need]
            if inner.any():
                w[need[inner]] = self._bank.weights(t.shape[rr[inner]], t.dz[rr[inner]],
                                                    ii[inner], t.flat[rr[inner]])
        return share_from(e, i, f, n, end, acc, w, t.total[rows])

    def _targets(self, rows: np.ndarray, elapsed_s: np.ndarray) -> np.ndarray:
        """``TargetPlan.target_micros`` of each row at ``elapsed_s`` (float micros), bit
        for bit (rows unique)."""
        t = self._rows
        b = t.plan_budget[rows].astype(np.float64)
        s = t.anchor_spend[rows].astype(np.float64)
        a, ca = t.anchor_s[rows], t.plan_ca[rows]
        out = np.where(s >= b, s, 0.0)
        before = (s < b) & (elapsed_s <= a) & (a != 0.0)
        after = (s < b) & (elapsed_s > a)
        full = after & (ca >= 1.0)
        out = np.where(full, b, out)
        share = before | (after & ~full)
        if share.any():
            ix = np.flatnonzero(share)
            c = self._shares(rows[ix], elapsed_s[ix])
            sb, bb, cab = s[ix], b[ix], ca[ix]
            out[ix] = np.where(before[ix], sb * c / np.maximum(cab, 1e-12),
                               sb + (bb - sb) * (c - cab) / (1.0 - cab))
        return out

    def _maybe_compact_shapes(self) -> None:
        table = self._bank.shapes
        if table.n < 4096 or table.n < 2 * (self._slots.n + 1):
            return
        live = np.flatnonzero(self._rows.live[: self._rows.n])
        keep = np.concatenate([self._slots.shape[: self._slots.n], self._rows.shape[live],
                               np.array([v for ps in self._period.values()
                                         for v in ps.masked.values()], dtype=np.int64),
                               np.array(list(self._pending_shapes.values()), dtype=np.int64),
                               np.array([self._default_sid])])
        remap = table.compact(keep)
        self._dp_shapes.clear()
        s = self._slots.shape[: self._slots.n]
        self._slots.shape[: self._slots.n] = np.where(s >= 0, remap[np.maximum(s, 0)], -1)
        self._rows.shape[live] = remap[self._rows.shape[live]]
        self._default_sid = int(remap[self._default_sid])
        self._pending_shapes = {c: int(remap[i]) for c, i in self._pending_shapes.items()}
        self._curves.clear()
        for ps in self._period.values():  # shape ids moved: masks and hours made again
            ps.masked.clear()
            ps.hours, ps.shape = None, -1

    def _curve_facts(self, rows: np.ndarray) -> None:
        """Total weight, flatness and peak share of each row's curve, made once per
        distinct (shape, day-zone) pair; each cursor starts at the minute of the row's
        first step (``last_step_s``: its first target is taken there)."""
        t, z = self._rows, self._bank.zones
        dz = t.dz[rows]
        first_e = t.last_step_s[rows] - t.start_s[rows]
        minute = np.clip(np.floor(first_e / 60.0).astype(np.int64), 0, z.end_minute[dz] - 1)
        key = (t.shape[rows] << 35) | (dz << 11) | minute
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        facts = self._bank.facts(t.shape[rows][first], dz[first], minute[first])
        t.total[rows] = facts.total[inv]
        t.flat[rows] = facts.flat[inv]
        t.peak_share[rows] = facts.peak[inv]
        t.cur_m[rows] = minute
        t.cur_acc[rows] = facts.acc[inv]
