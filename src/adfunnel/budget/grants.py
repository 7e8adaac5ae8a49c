"""Slices: granted to servers of metered, warm campaign-days; lapsed and expired.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). A slice's amount is outstanding from its grant
until it is closed or its expiry passes; one never closed counts as fully spent (a
crashed server may have used it) until billing's watermark passes its expiry.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from adfunnel.budget.columns import BID_CODE
from adfunnel.budget.day_rows import CampaignDay, day_budget
from adfunnel.budget.protocol import SliceGrant
from adfunnel.budget.rows import METERED, Slice
from adfunnel.budget.slices import (
    SLICE_TTL_S,
    grantable,
    last_charge,
    slice_size,
    worst_case_regime,
)
from adfunnel.campaigns.model import BidType

#: ``bid`` column code of CPM campaigns, whose serves' expected cost is their charge.
CPM_CODE = BID_CODE[BidType.CPM]


class Grants:
    """The slices of a :class:`~adfunnel.budget.service.BudgetService`."""

    def _grants(self, server_id: str, campaign_ids: Sequence[int],
                now: float) -> list[SliceGrant]:
        """A slice for each of ``campaign_ids`` that may have one now, in
        their order. Each campaign-day's grant reads and changes its own row only, so
        the rows are refreshed together, before and after, as one grant at a time
        would refresh each (what a report of thousands of wants costs follows them)."""
        rows, cids = [], []
        for cid in dict.fromkeys(campaign_ids):  # a campaign asked twice gets one slice
            slot = self._slot_of.get(cid)
            if slot is None or not self.owns(cid):
                continue
            row = self._current_row(slot, now)
            self._expire(row, now)
            rows.append(row)
            cids.append(cid)
        if not rows:
            return []
        ix = np.array(rows, dtype=np.int64)
        self._refresh(ix, now)
        t = self._rows
        ok = (t.state[ix] == METERED) & t.billed_read[ix]
        if not ok.any() or not self.warm(now):
            return []
        grants, granted = [], []
        for k in np.flatnonzero(ok).tolist():
            g = self._grant_row(server_id, cids[k], rows[k], now)
            if g is not None:
                grants.append(g)
                granted.append(rows[k])
        if granted:
            self._refresh(np.array(granted, dtype=np.int64), now)
        return grants

    def _grant_row(self, server_id: str, campaign_id: int, row: int,
                   now: float) -> SliceGrant | None:
        """A slice of metered, warm campaign-day ``row``, sized by :func:`slice_size`
        (None when that is 0); its outstanding amount counted at once."""
        t = self._rows
        slot = self._slot_of[campaign_id]
        charge = int(self._slots.charge[slot])
        cd = CampaignDay(self, row)
        g = grantable(day_budget(cd), int(t.billed[row]), cd.in_flight())
        rate = self._rates.get(row, {}).get(server_id, 0.0)
        last = last_charge(charge, int(self._slots.bid[slot]) == CPM_CODE,
                           int(t.served_total[row]), int(t.served_charges[row]))
        size = slice_size(rate, charge, g, int(t.sl_open[row]), last)
        if size <= 0:
            return None
        sid = f"{self.shard}-{next(self._slice_ids)}"
        self._slices.setdefault(row, {})[sid] = Slice(server_id, size, now + SLICE_TTL_S)
        self._slice_row[sid] = row
        t.sl_open[row] += size
        heapq.heappush(self._expiry, (now + SLICE_TTL_S, sid))
        return SliceGrant(sid, campaign_id, cd.day.isoformat(), size, now + SLICE_TTL_S,
                          worst_case_regime(g, charge), int(self._slots.version[slot]))

    def _lapse(self, now: float) -> None:
        """Open slices past their expiry leave the outstanding amount (``sl_open``)."""
        heap, t = self._expiry, self._rows
        while heap and heap[0][0] <= now:
            _, sid = heapq.heappop(heap)
            row = self._slice_row.get(sid)
            if row is None:
                continue
            s = self._slices[row][sid]
            if s.used is None and not s.lapsed:
                s.lapsed = True
                t.sl_open[row] -= s.amount

    def _expire(self, row: int, now: float) -> None:
        """Slices of ``row`` past their expiry without a close count as fully spent (a
        crashed server may have used them) until billing's watermark passes their
        expiry; used slices the watermark has passed are forgotten."""
        slices = self._slices.get(row)
        if not slices:
            return
        self._lapse(now)
        t = self._rows
        for s in slices.values():
            if s.used is None and s.expires_at <= now:
                if not s.lapsed:
                    s.lapsed = True
                    t.sl_open[row] -= s.amount
                s.used = s.amount
                s.closed_at = s.expires_at
                s.provisional = True
                t.sl_used[row] += s.amount
        w = float(t.watermark[row])
        if w:
            done = [k for k, s in slices.items() if s.used is not None and s.closed_at < w]
            for k in done:
                t.sl_used[row] -= slices.pop(k).used or 0
                del self._slice_row[k]
            if not slices:
                del self._slices[row]
