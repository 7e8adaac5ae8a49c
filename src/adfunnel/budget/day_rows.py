"""Campaign-day rows: made on first use, rolled to each campaign's local day, forgotten
two days after it ended; :class:`CampaignDay`, the view of one row.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). A row is found by key (campaign id <<
``DAY_BITS`` | day ordinal) or through its campaign's list of rows (``head``/``nxt``);
``_roll_over`` makes every owned campaign's current row the one of its local day, new
days in bulk.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime

import numpy as np

from adfunnel.budget.gate import effective_daily_budget
from adfunnel.budget.rows import DAY_BITS, STATES, STATUSES, PacingStatus, Slice
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import Campaign
from adfunnel.campaigns.schedule import local_day
from adfunnel.pacing import controller
from adfunnel.pacing.curve import TargetPlan

#: Seconds after a day's end at which a control step forgets it (two days).
FORGET_AFTER_S = 2 * 86400


def day_budget(cd: CampaignDay) -> int:
    """The campaign-day's budget, micros: min(daily, lifetime − billed on earlier days)."""
    return cd.day_budget()


class CampaignDay:
    """A live view of one campaign-day row of a
    :class:`~adfunnel.budget.service.BudgetService` (rebuildable from the ledger and the
    next reports). Attribute reads follow the service's columns."""

    __slots__ = ("_s", "row")

    def __init__(self, service: DayRows, row: int) -> None:
        self._s = service
        self.row = row

    def _col(self, name: str) -> np.ndarray:
        return getattr(self._s._rows, name)

    @property
    def campaign(self) -> Campaign:
        """The campaign record (fetched through ``BudgetService.campaign_loader`` for a
        campaign loaded as columns)."""
        return self._s.campaign(self.campaign_id)

    @property
    def campaign_id(self) -> int:
        return int(self._s._slots.cid[self._col("slot")[self.row]])

    @property
    def daily_budget_micros(self) -> int:
        return int(self._s._slots.daily[self._col("slot")[self.row]])

    def day_budget(self) -> int:
        """min(daily, lifetime − billed on earlier days), micros (≥ 0); for a flight or
        average-day campaign its day's allotment in place of the daily budget."""
        slot = self._col("slot")[self.row]
        life = int(self._s._slots.lifetime[slot])
        allot = int(self._col("allot")[self.row])
        return effective_daily_budget(allot if allot >= 0 else self.daily_budget_micros,
                                      None if life < 0 else life, self.lifetime_billed_before)

    @property
    def day(self) -> date:
        return date.fromordinal(int(self._col("day")[self.row]))

    @property
    def start_s(self) -> float:
        return float(self._col("start_s")[self.row])

    @property
    def end_s(self) -> float:
        return float(self._col("end_s")[self.row])

    @property
    def plan(self) -> TargetPlan:
        r, t = self.row, self._s._rows
        return TargetPlan(self._s._curve(int(t.shape[r]), int(t.dz[r])), int(t.plan_budget[r]),
                          float(t.anchor_s[r]), int(t.anchor_spend[r]))

    @property
    def ctl(self) -> controller.ControllerState:
        r, t = self.row, self._s._rows
        return controller.ControllerState(float(t.p[r]), float(t.integral[r]),
                                          float(t.spend_avg[r]), float(t.target_avg[r]),
                                          float(t.charges_avg[r]))

    @property
    def lam(self) -> float:
        """The bid multiplier λ ≥ 1 the campaign-day bids with (1 unless the campaign is
        automatic and paced: :mod:`adfunnel.budget.multipliers`)."""
        return float(self._s._lam_published(np.array([self.row]))[0][0])

    @property
    def state(self) -> BudgetState:
        return STATES[int(self._col("state")[self.row])]

    @property
    def status(self) -> PacingStatus:
        return STATUSES[int(self._col("status")[self.row])]

    @property
    def exhausted_at(self) -> float | None:
        v = float(self._col("exhausted_at")[self.row])
        return None if math.isnan(v) else v

    @property
    def p_by_minute(self) -> dict[int, float]:
        """p after the last control step of each elapsed minute that had one (empty
        once the next day was made from it, for a day whose p moved)."""
        return self._s._p_by_minute(self.row)

    def _int(self, name: str) -> int:
        return int(self._col(name)[self.row])

    billed = property(lambda self: self._int("billed"))
    settled_after = property(lambda self: self._int("settled_after"))
    lifetime_billed_before = property(lambda self: self._int("lifetime_before"))
    served_total = property(lambda self: self._int("served_total"))
    bucket_sum = property(lambda self: self._int("bucket_sum"))
    last_committed = property(lambda self: self._int("last_committed"))
    watermark = property(lambda self: float(self._col("watermark")[self.row]))
    peak_rate = property(lambda self: float(self._col("peak_rate")[self.row]))
    plan_peak_rate = property(lambda self: float(self._col("plan_peak_rate")[self.row]))
    rate_ewma = property(lambda self: float(self._col("rate_ewma")[self.row]))
    last_step_s = property(lambda self: float(self._col("last_step_s")[self.row]))
    rate_measured = property(lambda self: bool(self._col("rate_measured")[self.row]))

    @property
    def slices(self) -> dict[str, Slice]:
        return self._s._slices.get(self.row, {})

    @property
    def server_rates(self) -> dict[str, float]:
        return self._s._rates.get(self.row, {})

    # -- spend accounting -------------------------------------------------------------
    def in_flight(self) -> int:
        """Expected open spend not yet covered by billing + closed/expired slices' use
        (worst case for expired ones) not yet covered, less the expected cost of those
        serves whose event already billed, micros (≥ 0)."""
        return max(0, self._int("bucket_sum") + self._int("sl_used") - self._int("settled_after"))

    def spent(self) -> int:
        """Billed + in flight, leases excluded: the spend the controller follows."""
        return self._int("billed") + self.in_flight()

    def outstanding(self, now: float) -> int:
        """Amount of live (open, unexpired) slices, micros."""
        return sum(s.amount for s in self.slices.values() if s.used is None and s.expires_at > now)

    def committed(self, now: float) -> int:
        return self._int("billed") + self.in_flight() + self.outstanding(now)


class DayRows:
    """The campaign-day rows of a :class:`~adfunnel.budget.service.BudgetService`."""

    def _rows_of_slot(self, slot: int) -> list[int]:
        out = []
        r = int(self._slots.head[slot])
        while r >= 0:
            out.append(r)
            r = int(self._rows.nxt[r])
        return out

    def _row(self, campaign_id: int, day: date) -> int:
        """The row of (campaign, local day), made on first use; -1 for an unknown campaign."""
        row = self._row_of.get(campaign_id << DAY_BITS | day.toordinal())
        if row is not None:
            return row
        slot = self._slot_of.get(campaign_id)
        if slot is None:
            return -1
        return int(self._new_rows(np.array([slot]), np.array([day.toordinal()]),
                                  self._now())[0])

    def _new_rows(self, slots: np.ndarray, days: np.ndarray, now: float) -> np.ndarray:
        """Rows for (slot, day ordinal) pairs none of which exists yet (vectorised), with
        their curves, first p and state."""
        t, s = self._rows, self._slots
        rows = t.take(len(slots))
        dz = self._day_zones(s.tz[slots], days)
        z = self._bank.zones
        t.live[rows] = True
        t.slot[rows] = slots
        t.day[rows] = days
        t.dz[rows] = dz
        t.start_s[rows] = z.start_s[dz]
        t.end_s[rows] = z.end_s[dz]
        shape = s.shape[slots]
        t.shape[rows] = np.where(shape >= 0, shape, self._default_sid)
        t.own_shape[rows] = shape >= 0
        if self._dayparts:
            for r in rows[np.isin(slots, np.fromiter(self._dayparts, dtype=np.int64))].tolist():
                t.shape[r] = self._day_shape(int(t.slot[r]), r)
        if self._period:
            self._period_shapes(rows)
        t.last_step_s[rows] = np.maximum(now, t.start_s[rows])
        self._curve_facts(rows)
        daily = s.daily[slots]
        t.plan_budget[rows] = daily
        created = s.created[slots]
        mid = (t.start_s[rows] < created) & (created < t.end_s[rows])
        t.anchor_s[rows] = np.where(mid, created - t.start_s[rows], 0.0)
        if mid.any():
            t.plan_ca[rows[mid]] = self._shares(rows[mid], t.anchor_s[rows[mid]])
        t.plan_peak_rate[rows] = daily * t.peak_share[rows]
        if self._period:
            self._period_allot(rows, now)
        t.p[rows] = self._first_p(slots, days, rows, now)
        self._first_lams(slots, days, rows, now)
        keys = (s.cid[slots] << DAY_BITS) | days
        self._row_of.update(zip(keys.tolist(), rows.tolist(), strict=True))
        t.nxt[rows] = s.head[slots]
        s.head[slots] = rows
        self._first_end = min(self._first_end, float(t.end_s[rows].min()))
        self._refresh(rows, now)
        return rows

    def _day_zones(self, tz: np.ndarray, days: np.ndarray) -> np.ndarray:
        keys = tz * (1 << 24) + days
        uniq, inv = np.unique(keys, return_inverse=True)
        ids = np.array([self._bank.zones.get(self._tz_names[int(k >> 24)],
                                             date.fromordinal(int(k & ((1 << 24) - 1))))
                        for k in uniq], dtype=np.int64)
        return ids[inv]

    def _find_rows(self, slots: np.ndarray, days: np.ndarray) -> np.ndarray:
        """The row of each (slot, day ordinal) pair (-1: none): the slot's newest row
        when it is that day, else looked up (a campaign without rows costs nothing)."""
        t = self._rows
        out = np.full(len(slots), -1, dtype=np.int64)
        head = self._slots.head[slots]
        idx = np.flatnonzero(head >= 0)
        if not len(idx):
            return out
        hd = head[idx]
        match = t.day[hd] == days[idx]
        out[idx[match]] = hd[match]
        other = idx[~match]
        if len(other):
            keys = (self._slots.cid[slots[other]] << DAY_BITS) | days[other]
            out[other] = [self._row_of.get(k, -1) for k in keys.tolist()]
        return out

    def _current_row(self, slot: int, now: float) -> int:
        r = int(self._slots.cur[slot])
        t = self._rows
        if r >= 0 and t.start_s[r] <= now < t.end_s[r]:
            return r
        tz = self._tz_names[int(self._slots.tz[slot])]
        day = local_day(datetime.fromtimestamp(now, tz=UTC), tz)
        cid = int(self._slots.cid[slot])
        r = self._row(cid, day)
        self._slots.cur[slot] = r
        self._roll_lo = max(self._roll_lo, float(t.start_s[r]))
        self._next_roll = min(self._next_roll, float(t.end_s[r]))
        return r

    def _roll_over(self, now: float) -> np.ndarray:
        """Make every owned campaign's current row the one of its local day at ``now``
        (vectorised: new days are made in bulk); the current rows."""
        s, t = self._slots, self._rows
        slots = self.owned().slots
        if self._roll_lo <= now < self._next_roll:
            return s.cur[slots]
        cur = s.cur[slots]
        ok = cur >= 0
        ok[ok] = (t.start_s[cur[ok]] <= now) & (now < t.end_s[cur[ok]])
        need = slots[~ok]
        if len(need):
            days = self._local_days(s.tz[need], now)
            rows = self._find_rows(need, days)
            missing = rows < 0
            if missing.any():
                rows[missing] = self._new_rows(need[missing], days[missing], now)
            s.cur[need] = rows
        cur = s.cur[slots]
        self._next_roll = float(t.end_s[cur].min()) if len(cur) else math.inf
        self._roll_lo = float(t.start_s[cur].max()) if len(cur) else -math.inf
        return cur

    def _local_days(self, tz: np.ndarray, now: float) -> np.ndarray:
        at = datetime.fromtimestamp(now, tz=UTC)
        uniq, inv = np.unique(tz, return_inverse=True)
        days = np.array([local_day(at, self._tz_names[int(z)]).toordinal() for z in uniq],
                        dtype=np.int64)
        return days[inv]

    def _forget_old_days(self, now: float) -> None:
        """Drop the rows of days that ended more than two days ago."""
        t, s = self._rows, self._slots
        n = t.n
        live = t.live[:n]
        old = np.flatnonzero(live & (t.end_s[:n] < now - FORGET_AFTER_S))
        if len(old):
            cids = s.cid[t.slot[old]]
            for k in ((cids << DAY_BITS) | t.day[old]).tolist():
                self._row_of.pop(k, None)
            for row in old.tolist():
                self._buckets.pop(row, None)
                self._rates.pop(row, None)
                for sid in self._slices.pop(row, {}):
                    self._slice_row.pop(sid, None)
            hist = t.p_hist[old]
            self._history.release(hist[hist >= 0])
            hist = t.lam_hist[old]
            self._lam_history.release(hist[hist >= 0])
            sl = t.slot[old]
            s.cur[sl] = np.where(s.cur[sl] == old, -1, s.cur[sl])
            t.live[old] = False
            t.free.extend(old.tolist())
            self._relink()
        alive = np.flatnonzero(t.live[:n])
        self._first_end = float(t.end_s[alive].min()) if len(alive) else math.inf
        used = set(t.dz[alive].tolist())
        for d in [d for d in self._step_minutes if d not in used]:
            del self._step_minutes[d]

    def _relink(self) -> None:
        """Rebuild each campaign's list of rows from the live rows."""
        t, s = self._rows, self._slots
        live = np.flatnonzero(t.live[: t.n])
        order = live[np.argsort(t.slot[live], kind="stable")]
        sl = t.slot[order]
        s.head[: s.n] = -1
        t.nxt[: t.n] = -1
        if len(order):
            same = np.append(sl[1:] == sl[:-1], False)
            t.nxt[order[:-1]] = np.where(same[:-1], order[1:], -1)
            first = np.append(True, sl[1:] != sl[:-1])
            s.head[sl[first]] = order[first]
