"""The budget client's answers for many campaigns at once: one packed record per
campaign id, read by one compiled pass (the decision asks this for thousands of
campaigns; a column per field cost a random memory read per field and campaign).

Per campaign id: the local day (date ordinal) whose state is open, the day it is
stopped, its held slice with the most room on its latest day (day, room, expiry) and
its pacing rate p and bid multiplier λ (1 unless automatic). Written under the
client's lock by its directives and slices; read
by :meth:`adfunnel.budget.client.BudgetClient.bulk_admit`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from adfunnel.dense import DENSE_IDS
from adfunnel.pacing.bid_multiplier import LAMBDA_MAX

#: λ of a campaign no directive has spoken of yet: the lowest bids. A server that has
#: not heard from the budget service (just started, a new campaign) must not let an
#: automatic campaign bid its whole value v; manual campaigns never read λ.
UNKNOWN_LAMBDA = LAMBDA_MAX

#: One campaign's bulk view (48 bytes).
VIEW_FIELDS = np.dtype([("open_day", np.int32), ("stopped_day", np.int32),
                        ("slice_day", np.int32), ("p", np.float64), ("slice_room", np.int64),
                        ("slice_exp", np.float64), ("lam", np.float64)], align=True)
_FILL = {"open_day": -1, "stopped_day": -1, "slice_day": -1, "p": 1.0, "slice_room": 0,
         "slice_exp": 0.0, "lam": UNKNOWN_LAMBDA}
#: bulk answers (adfunnel.budget.gate: ADMIT, ASK)
_ADMIT, _ASK = 0, 2


class BulkView:
    """Growable records by campaign id (ids < ``DENSE_IDS``; others keep the fill)."""

    def __init__(self) -> None:
        self.values = _filled(1024)

    def reserve(self, size: int) -> None:
        size = min(size, DENSE_IDS)
        if size > len(self.values):
            grown = _filled(max(size, 2 * len(self.values)))
            grown[: len(self.values)] = self.values
            self.values = grown  # one reference swap: readers see the old or the new

    def set(self, campaign_id: int, field: str, value: float | int) -> None:
        if 0 <= campaign_id < DENSE_IDS:
            self.reserve(campaign_id + 1)
            self.values[field][campaign_id] = value

    def get_one(self, campaign_id: int, field: str) -> float | int:
        vals = self.values
        if 0 <= campaign_id < len(vals):
            return vals[field][campaign_id].item()  # type: ignore[no-any-return]
        return _FILL[field]

    def pacing(self, campaign_ids: np.ndarray) -> np.ndarray:
        """p of each campaign (float64[n]; 1.0 where never set)."""
        return _pacing(self.values, campaign_ids.astype(np.int64, copy=False))

    def multipliers(self, campaign_ids: np.ndarray) -> np.ndarray:
        """λ of each campaign (float64[n]; 1.0 where never set)."""
        return _multipliers(self.values, campaign_ids.astype(np.int64, copy=False))


def _filled(n: int) -> np.ndarray:
    out = np.zeros(n, dtype=VIEW_FIELDS)
    for name, value in _FILL.items():
        out[name] = value
    return out


@njit(cache=True, nogil=True)
def _pacing(view: np.ndarray, cids: np.ndarray) -> np.ndarray:
    out = np.ones(len(cids), np.float64)
    for i in range(len(cids)):
        c = cids[i]
        if 0 <= c < len(view):
            out[i] = view[c]["p"]
    return out


@njit(cache=True, nogil=True)
def _multipliers(view: np.ndarray, cids: np.ndarray) -> np.ndarray:
    out = np.full(len(cids), UNKNOWN_LAMBDA, np.float64)
    for i in range(len(cids)):
        c = cids[i]
        if 0 <= c < len(view):
            out[i] = view[c]["lam"]
    return out


@njit(cache=True, nogil=True)
def bulk_answers(view: np.ndarray, cids: np.ndarray, days: np.ndarray, charges: np.ndarray,
                 t: float, stale: np.ndarray, dem_t: np.ndarray, dem_charge: np.ndarray,
                 dem_day: np.ndarray) -> np.ndarray:
    """ADMIT where the campaign's state on its local day ``days[i]`` is open and its shard
    (``id % len(stale)``) has replied recently, or it is not stopped that day and holds
    a slice of that day, unexpired at ``t``, with room for ``charges[i]`` — recording
    that demand (charge, day, then instant, in arrays covering every such id); ASK
    everywhere else (ids beyond the view included)."""
    out = np.empty(len(cids), np.int8)
    n = len(view)
    shards = len(stale)
    for i in range(len(cids)):
        c = cids[i]
        out[i] = _ASK
        if c < 0 or c >= n:
            continue
        rec = view[c]
        d = days[i]
        if rec["open_day"] == d and not stale[c % shards]:
            out[i] = _ADMIT
        elif (rec["slice_day"] == d and rec["slice_exp"] > t
              and rec["slice_room"] >= charges[i] and rec["stopped_day"] != d):
            out[i] = _ADMIT
            dem_charge[c] = charges[i]
            dem_day[c] = d
            dem_t[c] = t  # last: an id is held once its time is set
    return out
