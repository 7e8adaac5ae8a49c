"""The client's bulk view: admits, p and λ of many campaigns in one call (``BulkGate``).

A part of :class:`~adfunnel.budget.client.BudgetClient` (mixed in: its state is declared
in ``BudgetClient.__init__``). The view (:class:`~adfunnel.budget.bulk_view.BulkView`)
holds per campaign id the local day whose state is open, the day it is stopped, p, λ and
its best held slice; the parts keep it in step with every directive and slice change.
Money in integer micros, times in domain seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date

import numpy as np

from adfunnel.budget.bulk_view import UNKNOWN_LAMBDA, bulk_answers
from adfunnel.budget.gate import DENSE_IDS
from adfunnel.budget.slices import BudgetState


class ClientBulk:
    """The ``BulkGate`` side of a :class:`~adfunnel.budget.client.BudgetClient`."""

    def bulk_admit(self, campaign_ids: np.ndarray, day_ordinals: np.ndarray,
                   charges: np.ndarray, budgets: np.ndarray, t: float) -> np.ndarray:
        """:class:`~adfunnel.budget.gate.BulkGate`: ADMIT where :meth:`admit` would answer
        None — the campaign's state on its local day is open and its shard has replied
        recently, or it is not stopped and holds a slice of that day with room for the
        charge (recording its demand, as ``admit`` does); ASK everywhere else."""
        cids = campaign_ids.astype(np.int64, copy=False)
        with self._lock:
            stale = np.array([t - last > self.fail_closed_after_s for last in self._last_reply])
            view = self._bulk.values
            # not added to _asking: each admitted by its slice holds one with room for this
            # charge, and what could take that away (expiry, use, release, a directive)
            # adds it
            dem_t, dem_charge, dem_day = self._demand.arrays(len(view))
            return bulk_answers(view, cids, day_ordinals.astype(np.int32, copy=False),
                                charges.astype(np.int64, copy=False), float(t), stale,
                                dem_t, dem_charge, dem_day)

    def _index_slices(self, cid: int) -> None:
        """Keep the bulk view's best slice of ``cid`` in step (under the lock): the one
        with the most room on the latest day it holds slices for."""
        best = max(self._slices.get(cid, ()), key=lambda s: (s.day, s.amount - s.used),
                   default=None)
        if best is None:
            self._bulk.set(cid, "slice_day", -1)
            return
        self._bulk.set(cid, "slice_room", best.amount - best.used)
        self._bulk.set(cid, "slice_exp", best.expires_at)
        self._bulk.set(cid, "slice_day", best.day.toordinal())

    def bulk_pacing(self, campaign_ids: np.ndarray) -> np.ndarray:
        """p of each campaign (float64[n]), as :meth:`pacing_rate` answers."""
        return self._bulk_read(self._bulk.pacing, self._p, campaign_ids)

    def bulk_multiplier(self, campaign_ids: np.ndarray) -> np.ndarray:
        """λ of each campaign (float64[n]), as :meth:`bid_multiplier` answers."""
        return self._bulk_read(self._bulk.multipliers, self._lam, campaign_ids, UNKNOWN_LAMBDA)

    def _bulk_read(self, read: Callable[[np.ndarray], np.ndarray], held: dict[int, float],
                   campaign_ids: np.ndarray, unknown: float = 1.0) -> np.ndarray:
        """The bulk view's values (ids < ``DENSE_IDS``), else ``held``'s (or ``unknown``)."""
        out = read(campaign_ids)
        big = campaign_ids >= DENSE_IDS
        if big.any():
            with self._lock:
                out[big] = [held.get(int(c), unknown) for c in campaign_ids[big]]
        return out

    def _note_directive(self, campaign_id: int, day: date | None, state: BudgetState,
                        p: float, lam: float = 1.0) -> None:
        """Keep the bulk view in step with one directive (called under the lock)."""
        bulk = self._bulk
        bulk.set(campaign_id, "p", p)
        bulk.set(campaign_id, "lam", lam)
        if day is None:
            return
        ordinal = day.toordinal()
        if state is BudgetState.STOPPED:
            bulk.set(campaign_id, "stopped_day", ordinal)
        elif bulk.get_one(campaign_id, "stopped_day") == ordinal:
            bulk.set(campaign_id, "stopped_day", -1)
        held = bulk.get_one(campaign_id, "open_day")
        if state is BudgetState.OPEN:
            if ordinal >= held:
                bulk.set(campaign_id, "open_day", ordinal)
        elif held == ordinal:
            bulk.set(campaign_id, "open_day", -1)
