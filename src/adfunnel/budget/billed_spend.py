"""Billed spend from the ledger feed, applied to campaign-days.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). A billed update replaces the estimates of the
serves before its watermark and settles those after it whose event billed
(:class:`~adfunnel.budget.protocol.BilledUpdate`); the bulk form applies the whole feed
as columns.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import date

import numpy as np

from adfunnel.budget.protocol import BilledColumns, BilledUpdate
from adfunnel.budget.rows import DAY_BITS, S_COLD


class BilledSpend:
    """The billed spend of a :class:`~adfunnel.budget.service.BudgetService`."""

    def record_billed(self, update: BilledUpdate) -> None:
        """Billed spend from the ledger: replaces the estimates served before its watermark.
        Idempotent (cumulative values, monotone watermark)."""
        row = self._row(update.campaign_id, date.fromisoformat(update.day))
        if row < 0:
            return
        t = self._rows
        t.billed_read[row] = True
        t.billed[row] = max(int(t.billed[row]), update.billed_micros)
        t.lifetime_before[row] = max(int(t.lifetime_before[row]),
                                     update.lifetime_billed_before_micros)
        wm = float(t.watermark[row])
        if update.complete_before >= wm:
            t.settled_after[row] = max(0, update.settled_after_micros)
        if update.complete_before > wm:
            t.watermark[row] = update.complete_before
            self._pop_buckets(row)
        now = self._now()
        self._expire(row, now)
        self._refresh(np.array([row]), now)

    def record_billed_bulk(self, cols: BilledColumns) -> int:
        """:meth:`record_billed` for many campaign-days at once (the billed feed at start
        and every few seconds), vectorised. A row whose values did not move, that holds
        no spend buckets or slices and is not cold keeps its state as it is (its refresh
        would give it again) and costs no Python work. Returns the rows applied."""
        now = self._now()
        owned = self._owned_cache
        if owned is not None and cols.campaign_ids is owned.ids:
            self._roll_over(now)  # today's rows in bulk, found through their slots
            rows = self._rows_of_slots(owned.slots, cols.days, now)
        else:
            rows = self._rows_for(cols.campaign_ids, cols.days, now)
        ok = rows >= 0
        rows = rows[ok]
        t = self._rows
        billed = np.maximum(t.billed[rows], cols.billed_micros[ok])
        life = np.maximum(t.lifetime_before[rows], cols.lifetime_billed_before_micros[ok])
        wm, cb = t.watermark[rows], cols.complete_before[ok]
        settled = np.where(cb >= wm, np.maximum(0, cols.settled_after_micros[ok]),
                           t.settled_after[rows])
        moved = ((billed != t.billed[rows]) | (life != t.lifetime_before[rows])
                 | (settled != t.settled_after[rows]) | ~t.billed_read[rows]
                 | (t.status[rows] == S_COLD))
        t.billed_read[rows] = True
        t.billed[rows] = billed
        t.lifetime_before[rows] = life
        t.settled_after[rows] = settled
        t.watermark[rows] = np.maximum(wm, cb)
        sparse = self._among(rows, itertools.chain(self._buckets, self._slices))
        for row in sparse:
            self._pop_buckets(row)
            self._expire(row, now)
        if sparse:
            moved |= np.isin(rows, np.fromiter(sparse, dtype=np.int64, count=len(sparse)))
        self._refresh(rows[moved], now)
        return len(rows)

    def _among(self, rows: np.ndarray, sparse: Iterable[int]) -> set[int]:
        """The rows of ``sparse`` (a few) that are in ``rows`` (many), without a set of
        ``rows``."""
        keys = list(sparse)
        if not keys:
            return set()
        mask = np.zeros(self._rows.n, dtype=bool)
        mask[rows] = True
        return {r for r in keys if mask[r]}

    def _pop_buckets(self, row: int) -> None:
        b = self._buckets.get(row)
        if not b:
            return
        w = float(self._rows.watermark[row])
        gone = 0
        while b and b[0][0] < w:
            gone += b.popleft()[1]
        self._rows.bucket_sum[row] -= gone
        if not b:
            del self._buckets[row]

    def _rows_of_slots(self, slots: np.ndarray, days: np.ndarray, now: float) -> np.ndarray:
        """Rows of (slot, day ordinal) pairs: the slot's current row when it is that
        day (no index lookup: the billed feed names today), else :meth:`_rows_for`."""
        cur = self._slots.cur[slots]
        rows = np.full(len(slots), -1, dtype=np.int64)
        has = cur >= 0
        has[has] = self._rows.day[cur[has]] == days[has]
        rows[has] = cur[has]
        rest = np.flatnonzero(~has)
        if len(rest):
            found = self._find_rows(slots[rest], days[rest])
            miss = found < 0
            if miss.any():
                found[miss] = self._new_rows(slots[rest][miss], days[rest][miss], now)
            rows[rest] = found
        return rows

    def _rows_for(self, campaign_ids: np.ndarray, days: np.ndarray, now: float) -> np.ndarray:
        """Rows of (campaign id, day ordinal) pairs, made in bulk where missing; -1 for
        unknown campaigns."""
        keys = (campaign_ids.astype(np.int64) << DAY_BITS) | days.astype(np.int64)
        get = self._row_of.get
        rows = np.array([get(k, -1) for k in keys.tolist()], dtype=np.int64)
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            so = self._slot_of.get
            slots = np.array([so(c, -1) for c in campaign_ids[missing].tolist()], dtype=np.int64)
            known = slots >= 0
            if known.any():
                m = missing[known]
                rows[m] = self._new_rows(slots[known], days[m].astype(np.int64), now)
        return rows
