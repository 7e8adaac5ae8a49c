"""The client's held slices and demand: room for a charge, release, expiry, wants.

A part of :class:`~adfunnel.budget.client.BudgetClient` (mixed in: its state is declared
in ``BudgetClient.__init__``). A metered campaign's last demand keeps a slice wanted for
``DEMAND_MEMORY_S``; a report asks the service for a slice for each campaign that has
such demand and holds no slice of its day with room for its charge. Money in integer
micros, times in domain seconds.
"""

from __future__ import annotations

import heapq
from datetime import date

from adfunnel.budget.demand import Demand
from adfunnel.budget.held import HeldSlice
from adfunnel.budget.protocol import SliceUse
from adfunnel.budget.slices import BudgetState

#: Seconds a metered campaign's last demand keeps a slice requested (low-rate campaigns
#: would otherwise see every slice expire before their next request).
DEMAND_MEMORY_S = 600.0


class ClientSlices:
    """The held slices and demand of a :class:`~adfunnel.budget.client.BudgetClient`."""

    def held_slices(self) -> list[HeldSlice]:
        with self._lock:
            return [s for lst in self._slices.values() for s in lst]

    def _slice_with_room(self, cid: int, day: date, t: float, charge: int) -> HeldSlice | None:
        for s in self._slices.get(cid, ()):
            if s.day == day and s.expires_at > t and s.amount - s.used >= charge:
                return s
        return None

    def _release(self, s: HeldSlice) -> None:
        """Close held slice ``s`` (its use goes with the next report); nothing when it is
        no longer held."""
        lst = self._slices.get(s.campaign_id)
        if lst is None or not any(x is s for x in lst):
            return
        lst[:] = [x for x in lst if x is not s]
        if not lst:
            del self._slices[s.campaign_id]
        self._closed[s.campaign_id % self.shards].append(
            SliceUse(s.slice_id, s.used, s.last_used or s.expires_at))
        self._index_slices(s.campaign_id)
        self._note_slices_changed(s.campaign_id)

    def _expire_slices(self, now: float) -> None:
        """Close every held slice past its expiry (popped from ``_expiry``: a slice
        released or dropped before is no longer held, and is skipped)."""
        heap = self._expiry
        while heap and heap[0][0] <= now:
            self._release(heapq.heappop(heap)[2])

    def _note_slices_changed(self, cid: int) -> None:
        """A held slice of ``cid`` changed: the next report looks at its demand again."""
        if cid in self._demand:
            self._asking.add(cid)

    def _live_demand(self, cid: int) -> Demand | None:
        """``cid``'s demand unless the last report found it older than DEMAND_MEMORY_S."""
        d = self._demand.get(cid)
        if d is None or self._reported_at - d[0] > DEMAND_MEMORY_S:
            return None
        return d

    def _collect_wants(self, now: float) -> None:
        """Add to ``_wants`` every campaign with demand in the last DEMAND_MEMORY_S that
        is metered and holds no slice with room for its charge; forget older demand.

        Looks at ``_asking`` only, unless a shard is past ``fail_closed_after_s``
        (every open campaign of it is then metered): then at every demand."""
        self._reported_at = max(self._reported_at, now)
        stale = any(now - last > self.fail_closed_after_s for last in self._last_reply)
        for cid in self._demand.ids() if stale else list(self._asking):
            entry = self._demand.get(cid)
            if entry is None or now - entry[0] > DEMAND_MEMORY_S:
                self._demand.pop(cid)
                self._asking.discard(cid)
                continue
            _, charge, day = entry
            if (self._effective_state(cid, day, now) is BudgetState.METERED
                    and self._slice_with_room(cid, day, now, charge) is None):
                self._wants.add(cid)
                self._asking.add(cid)
            else:
                self._asking.discard(cid)

    def _forget_old_demand(self) -> None:
        """Drop demand the last report found older than DEMAND_MEMORY_S (bounded memory;
        ``_live_demand`` already ignores it)."""
        for cid in self._demand.older_than(self._reported_at - DEMAND_MEMORY_S):
            self._demand.pop(cid)
            self._asking.discard(cid)

