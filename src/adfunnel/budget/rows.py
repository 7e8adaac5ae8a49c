"""The budget service's tables: campaign slots and campaign-day rows as numpy columns.

A campaign is a *slot* (what the state rules read from its record), a campaign-day is a
*row* (its curve, controller, spend and state); both are growable columns with a free
list (:class:`Columns`). Slices live in per-row dicts (:class:`Slice`), p by minute of
the days whose p moved in :class:`History`. The integer codes of the state and status
columns are here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from adfunnel.budget.columns import NO_END
from adfunnel.budget.slices import BudgetState
from adfunnel.pacing.curve_bank import MAX_MINUTES

#: Key of a campaign-day in the row index: campaign id << DAY_BITS | day ordinal.
DAY_BITS = 22


class PacingStatus(StrEnum):
    PACING = "pacing"
    LIMITED_BY_BUDGET = "limited_by_budget"
    LIMITED_BY_BID_OR_AUDIENCE = "limited_by_bid_or_audience"
    EXHAUSTED = "exhausted"
    STOPPED = "stopped"
    #: a (re)started instance that has not yet read the day's billed spend or heard
    #: every server: metered, no grants
    COLD = "cold"


# integer codes of the state columns
OPEN, METERED, EXHAUSTED, STOPPED = 0, 1, 2, 3
STATES = (BudgetState.OPEN, BudgetState.METERED, BudgetState.EXHAUSTED, BudgetState.STOPPED)
STATE_VALUES = tuple(s.value for s in STATES)
STATUSES = tuple(PacingStatus)
S_PACING, S_BUDGET, S_BID, S_EXHAUSTED, S_STOPPED, S_COLD = range(6)


@dataclass(slots=True)
class Slice:
    server_id: str
    amount: int
    expires_at: float
    used: int | None = None  # set when the server closes it
    closed_at: float = 0.0
    provisional: bool = False  # expired here before the server closed it: worst case
    lapsed: bool = False  # past its expiry and still open: no longer outstanding


# -- columns -----------------------------------------------------------------------------------
_I8, _I64, _F64, _B = np.int8, np.int64, np.float64, np.bool_
NAN = float("nan")

#: Per campaign (a slot): what the state rules read from its record.
SLOT_COLUMNS: dict[str, tuple[type, float]] = {
    "cid": (_I64, -1), "version": (_I64, 0), "bid": (_I8, 0), "charge": (_I64, 1),
    "daily": (_I64, 0), "lifetime": (_I64, -1),
    "even": (_B, 0), "accel": (_B, 0), "active": (_B, 0), "owned": (_B, 0),
    "fstart": (_I64, 0), "fend": (_I64, NO_END), "tz": (_I64, 0), "shape": (_I64, -1),
    "created": (_F64, NAN), "cur": (_I64, -1), "head": (_I64, -1),
    # automatic bidding (adfunnel.budget.multipliers): an automatic strategy, its
    # bid_strategy_since (Unix s; NaN: none) and its latest λ (NaN: none yet)
    "auto": (_B, 0), "since": (_F64, NAN), "lam_last": (_F64, NAN),
}
#: Per campaign-day (a row). Curve: ``total`` weight of the active minutes (``flat``:
#: none, each minute weighs 1), ``peak_share`` per second, and a cursor (``cur_m``
#: minutes added up to ``cur_acc``, left to right). p history for the next day:
#: ``p_first`` (first minute a step recorded p, -1: none), ``p_const`` (p of every step
#: so far, while it never moved) and ``p_hist`` (row of :class:`History` once it moved).
ROW_COLUMNS: dict[str, tuple[type, float]] = {
    "live": (_B, 0), "slot": (_I64, -1), "nxt": (_I64, -1), "day": (_I64, 0),
    "dz": (_I64, 0), "start_s": (_F64, 0), "end_s": (_F64, 0),
    "shape": (_I64, 0), "own_shape": (_B, 0),
    "total": (_F64, 0), "flat": (_B, 0), "peak_share": (_F64, 0),
    "cur_m": (_I64, 0), "cur_acc": (_F64, 0),
    "plan_budget": (_I64, 0), "anchor_s": (_F64, 0), "anchor_spend": (_I64, 0),
    "plan_ca": (_F64, 0), "plan_peak_rate": (_F64, 0), "target_last": (_F64, NAN),
    "p": (_F64, 1), "integral": (_F64, 0), "spend_avg": (_F64, -1),
    "target_avg": (_F64, -1), "charges_avg": (_F64, -1),
    "billed": (_I64, 0), "settled_after": (_I64, 0), "lifetime_before": (_I64, 0),
    "watermark": (_F64, 0), "billed_read": (_B, 0),
    "bucket_sum": (_I64, 0), "sl_used": (_I64, 0), "sl_open": (_I64, 0),
    "step_spend": (_I64, 0), "step_charges": (_I64, 0), "served_total": (_I64, 0),
    "served_charges": (_I64, 0),
    "rate_ewma": (_F64, 0), "peak_rate": (_F64, 0), "last_step_s": (_F64, 0),
    "last_committed": (_I64, -1), "rate_measured": (_B, 0),
    "state": (_I8, METERED), "status": (_I8, S_COLD), "exhausted_at": (_F64, NAN),
    "pub_state": (_I8, -1), "pub_p": (_F64, NAN), "ver": (_I64, 0),
    "p_first": (_I64, -1), "p_const": (_F64, NAN), "p_hist": (_I64, -1),
    # the day's budget of a flight or average-day campaign (-1: a day campaign's row,
    # whose budget is its daily budget; adfunnel.budget.periods)
    "allot": (_I64, -1),
    # the bid multiplier λ of an automatic campaign's day and its controller state (the
    # averages < 0: none yet), λ last published, its row of quarter hours (-1: none),
    # and whether it moved since it was last handed to the store (adfunnel.budget.lam_resume)
    "lam": (_F64, 1), "lam_integral": (_F64, 0), "lam_spend_avg": (_F64, -1),
    "lam_target_avg": (_F64, -1), "lam_charges_avg": (_F64, -1), "pub_lam": (_F64, NAN),
    "lam_hist": (_I64, -1), "lam_dirty": (_B, 0),
}


class Columns:
    """Growable numpy columns (one attribute per column) with a free list."""

    def __init__(self, spec: dict[str, tuple[type, float]], capacity: int = 256) -> None:
        self.spec = spec
        self.n = 0
        self.cap = 0
        self.free: list[int] = []
        self._alloc(capacity)

    def _alloc(self, cap: int) -> None:
        for name, (dtype, fill) in self.spec.items():
            arr = np.full(cap, fill, dtype=dtype)
            if self.cap:
                arr[: self.cap] = getattr(self, name)
            setattr(self, name, arr)
        self.cap = cap

    def take(self, k: int) -> np.ndarray:
        """``k`` fresh rows (reset to their fills), reusing freed ones first."""
        r = min(k, len(self.free))
        reuse = np.array(self.free[len(self.free) - r:], dtype=np.int64)
        del self.free[len(self.free) - r:]
        new = k - r
        if self.n + new > self.cap:
            self._alloc(max(self.n + new, 2 * self.cap))
        rows = np.concatenate([reuse, np.arange(self.n, self.n + new, dtype=np.int64)])
        self.n += new
        if r:
            self.reset(reuse)
        return rows

    def reset(self, rows: np.ndarray) -> None:
        for name, (_, fill) in self.spec.items():
            getattr(self, name)[rows] = fill


class History:
    """p of campaign-days by elapsed minute (NaN: no step in that minute), one row of
    ``MAX_MINUTES`` floats per campaign-day whose p moved during its day."""

    def __init__(self) -> None:
        self.data = np.full((0, MAX_MINUTES), NAN)
        self.free: list[int] = []

    def take(self, k: int) -> np.ndarray:
        """``k`` rows of NaN."""
        if len(self.free) < k:
            n = len(self.data)
            cap = max(2 * n, n + k - len(self.free), 64)
            data = np.full((cap, MAX_MINUTES), NAN)
            data[:n] = self.data
            self.data = data
            self.free.extend(range(cap - 1, n - 1, -1))
        idx = np.array(self.free[len(self.free) - k:], dtype=np.int64)
        del self.free[len(self.free) - k:]
        self.data[idx] = NAN
        return idx

    def release(self, idx: np.ndarray) -> None:
        self.free.extend(idx.tolist())
