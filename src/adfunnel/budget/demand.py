"""Each campaign's last metered demand, as the budget client keeps it.

A metered campaign's demand — the instant it last wanted to spend, the charge it asked
room for and its local day — keeps a slice requested for a while after the campaign
asks (``DEMAND_MEMORY_S`` in :mod:`adfunnel.budget.client_slices`), and sizes what a serve must
leave in a slice. The columnar decider records it for thousands of campaigns per
decision, so it lives in arrays by campaign id (a dict for ids beyond the dense range).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import date

import numpy as np

from adfunnel.dense import DENSE_IDS, DenseIds

#: (instant in Unix s, charge in micros, the campaign's local day)
Demand = tuple[float, int, date]


class DemandBook:
    """Campaign id → :data:`Demand`, with a bulk write. Not thread-safe (the client's
    lock guards it)."""

    def __init__(self) -> None:
        self._t = DenseIds(np.float64, math.nan)  # NaN: no demand held
        self._charge = DenseIds(np.int64, 0)
        self._day = DenseIds(np.int32, 0)
        self._big: dict[int, Demand] = {}
        self._days: dict[int, date] = {}

    def set(self, campaign_id: int, t: float, charge: int, day: date) -> None:
        if 0 <= campaign_id < DENSE_IDS:
            self._t.set(campaign_id, t)
            self._charge.set(campaign_id, charge)
            self._day.set(campaign_id, day.toordinal())
        else:
            self._big[campaign_id] = (t, charge, day)

    def set_many(self, campaign_ids: np.ndarray, t: float, charges: np.ndarray,
                 day_ordinals: np.ndarray) -> None:
        """:meth:`set` for every id of ``campaign_ids`` at instant ``t``."""
        big = campaign_ids >= DENSE_IDS
        if big.any():
            for cid, ch, o in zip(campaign_ids[big].tolist(), charges[big].tolist(),
                                  day_ordinals[big].tolist(), strict=True):
                self._big[cid] = (t, ch, self._date(o))
        self._charge.set_many(campaign_ids, charges)
        self._day.set_many(campaign_ids, day_ordinals)
        self._t.set_many(campaign_ids, t)  # last: an id is held once its time is set

    def arrays(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The dense (instant, charge, day ordinal) arrays, grown to hold ids below
        ``size``, for a compiled bulk write (charge and day first, the instant last)."""
        for col in (self._charge, self._day, self._t):
            col.reserve(size)
        return self._t.values, self._charge.values, self._day.values

    def get(self, campaign_id: int) -> Demand | None:
        if not 0 <= campaign_id < DENSE_IDS:
            return self._big.get(campaign_id)
        t = self._t.get_one(campaign_id)
        if math.isnan(t):
            return None
        return (t, int(self._charge.get_one(campaign_id)),
                self._date(int(self._day.get_one(campaign_id))))

    def __contains__(self, campaign_id: int) -> bool:
        if not 0 <= campaign_id < DENSE_IDS:
            return campaign_id in self._big
        return not math.isnan(self._t.get_one(campaign_id))

    def pop(self, campaign_id: int) -> None:
        """Forget ``campaign_id``'s demand (nothing when none is held)."""
        if 0 <= campaign_id < DENSE_IDS:
            self._t.set(campaign_id, math.nan)
        else:
            self._big.pop(campaign_id, None)

    def ids(self) -> list[int]:
        """Every campaign with demand held (a scan: for rare paths)."""
        held = np.flatnonzero(~np.isnan(self._t.values)).tolist()
        return [*held, *self._big]

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids())

    def as_dict(self) -> dict[int, Demand]:
        """Every demand held, by campaign id (a scan: for tests and status)."""
        out: dict[int, Demand] = {}
        for cid in self.ids():
            d = self.get(cid)
            if d is not None:
                out[cid] = d
        return out

    def older_than(self, cut: float) -> list[int]:
        """Campaigns whose demand is from before instant ``cut``."""
        t = self._t.values
        old = np.flatnonzero(t < cut).tolist()  # NaN compares False
        return [*old, *(c for c, d in self._big.items() if d[0] < cut)]

    def clear(self) -> None:
        self._t.values[:] = math.nan
        self._big.clear()

    def _date(self, ordinal: int) -> date:
        d = self._days.get(ordinal)
        if d is None:
            if len(self._days) > 64:
                self._days.clear()
            d = self._days[ordinal] = date.fromordinal(ordinal)
        return d
