"""λ kept across restarts: automatic campaign-days' multipliers in the store (issue #27).

The budget service steps λ of each automatic campaign-day every control step
(:mod:`adfunnel.budget.multipliers`); a restarted service that held none would restart
every automatic campaign at ``START_LAMBDA`` (10⁴: bids ~0) and bid almost nothing for
the 7 minutes the controller takes to walk λ down. So the process writes the λ state of
the campaign-days that stepped since its last write (:meth:`SqlLamStore.save`, every
``LAM_SAVE_S`` of domain time and at stop) to the ``budget_multipliers`` table of the
campaign store's database, and a starting process reads it back
(:meth:`~adfunnel.budget.lam_resume.ResumeMultipliers.resume_multipliers`).

:class:`KeptLams` is the row set in columns (one entry per campaign-day), the shape both
directions use: at 10⁶ campaigns no object per campaign is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np
from sqlalchemy import Engine, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from adfunnel.budget.multiplier_tables import budget_multipliers
from adfunnel.db import connection_guard
from adfunnel.pacing.bid_multiplier import clamp_lambda

#: Seconds of domain time between writes of stepped λ (a crash loses at most this much
#: of λ's walk: 3 steps of 10 s, each ±25 % at most; a clean stop writes everything).
LAM_SAVE_S = 30.0
#: Days of kept λ, before today's (UTC), that the store keeps: a new day reads
#: yesterday's (a local day may run up to a day behind UTC's).
KEEP_DAYS = 2
#: Rows per statement of a write.
_CHUNK = 5_000


@dataclass(slots=True)
class KeptLams:
    """λ states of campaign-days as columns, all of one length.

    Attributes:
        campaign_id: campaign ids (int64).
        day: local day ordinals (int64, ``date.toordinal``).
        lam, integral, spend_avg, target_avg, charges_avg: the λ controller's state
            (:class:`~adfunnel.pacing.bid_multiplier.MultiplierArrays`: λ, the leaky
            integral as a share of the budget, EWMAs of micros and charges per step;
            < 0: none yet), float64.
        stepped_at: Unix seconds (domain clock) of the state's last step or restart.
        since: the campaign's ``bid_strategy_since`` the λ belongs to, Unix s (NaN: none).
        quarters: λ by quarter hour of the day, float32 rows (NaN: no step in it; a row
            of NaN: none kept), shape (n, ``LAM_SLOTS``).
    """

    campaign_id: np.ndarray
    day: np.ndarray
    lam: np.ndarray
    integral: np.ndarray
    spend_avg: np.ndarray
    target_avg: np.ndarray
    charges_avg: np.ndarray
    stepped_at: np.ndarray
    since: np.ndarray
    quarters: np.ndarray

    def __len__(self) -> int:
        return len(self.campaign_id)

    @classmethod
    def empty(cls, slots: int) -> KeptLams:
        f = np.zeros(0, dtype=np.float64)
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), f, f, f, f, f,
                   f, f, np.zeros((0, slots), dtype=np.float32))


class SqlLamStore:
    """The ``budget_multipliers`` table: one row per automatic campaign-day, upserted."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert

    def save(self, kept: KeptLams) -> int:
        """Write ``kept`` (insert or replace each campaign-day), one transaction; how many."""
        if not len(kept):
            return 0
        stmt = self._insert(budget_multipliers)
        cols = ("lam", "integral", "spend_avg", "target_avg", "charges_avg", "stepped_at",
                "strategy_since", "quarters")
        stmt = stmt.on_conflict_do_update(index_elements=["campaign_id", "day"],
                                          set_={c: stmt.excluded[c] for c in cols})
        rows = [_row(kept, i) for i in range(len(kept))]
        with connection_guard(self.engine), self.engine.begin() as conn:
            for a in range(0, len(rows), _CHUNK):
                conn.execute(stmt, rows[a:a + _CHUNK])
        return len(rows)

    def load(self, since_day: date, slots: int) -> KeptLams:
        """Every kept campaign-day from ``since_day`` on; ``slots``: the quarters per day
        (a row whose ``quarters`` has another length keeps none)."""
        t = budget_multipliers.c
        q = select(t.campaign_id, t.day, t.lam, t.integral, t.spend_avg, t.target_avg,
                   t.charges_avg, t.stepped_at, t.strategy_since, t.quarters
                   ).where(t.day >= since_day).order_by(t.campaign_id, t.day)
        with connection_guard(self.engine), self.engine.connect() as conn:
            rows = conn.execute(q).all()
        if not rows:
            return KeptLams.empty(slots)
        quarters = np.full((len(rows), slots), np.nan, dtype=np.float32)
        for i, r in enumerate(rows):
            if r.quarters is not None and len(r.quarters) == 4 * slots:
                quarters[i] = np.frombuffer(r.quarters, dtype=np.float32)

        def col(k: int) -> np.ndarray:
            return np.array([np.nan if r[k] is None else r[k] for r in rows], dtype=np.float64)

        return KeptLams(
            np.array([r.campaign_id for r in rows], dtype=np.int64),
            np.array([r.day.toordinal() for r in rows], dtype=np.int64),
            # a corrupt λ comes back in range: bids never above the value
            np.array([clamp_lambda(r.lam) for r in rows], dtype=np.float64),
            col(3), col(4), col(5), col(6), col(7), col(8), quarters)

    def forget(self, today: date) -> int:
        """Drop kept days more than ``KEEP_DAYS`` before ``today``; how many."""
        t = budget_multipliers.c
        with connection_guard(self.engine), self.engine.begin() as conn:
            return conn.execute(delete(budget_multipliers).where(
                t.day < today - timedelta(days=KEEP_DAYS))).rowcount


def _row(kept: KeptLams, i: int) -> dict[str, object]:
    since = float(kept.since[i])
    q = kept.quarters[i]
    return {
        "campaign_id": int(kept.campaign_id[i]), "day": date.fromordinal(int(kept.day[i])),
        "lam": float(kept.lam[i]), "integral": float(kept.integral[i]),
        "spend_avg": float(kept.spend_avg[i]), "target_avg": float(kept.target_avg[i]),
        "charges_avg": float(kept.charges_avg[i]), "stepped_at": float(kept.stepped_at[i]),
        "strategy_since": None if np.isnan(since) else since,
        "quarters": None if np.isnan(q).all() else np.ascontiguousarray(
            q, dtype=np.float32).tobytes(),
    }
