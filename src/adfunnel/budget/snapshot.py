"""A shard's budget state as columns: what a metrics scrape reads in one bulk pass.

:meth:`adfunnel.budget.service.BudgetService.snapshot` makes it from the
service's own numpy columns (no object per campaign), so a scrape at catalogue scale
costs milliseconds under the service's lock, not a second (README, "Metrics").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Budget states in code order (``BudgetSnapshot.state`` indexes this).
STATE_NAMES = ("open", "metered", "exhausted", "stopped")


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """One entry per campaign, on its current local day; every array has one length.

    Attributes:
        campaign_id: campaign ids (int64).
        state: budget state codes (int8), indexes of :data:`STATE_NAMES`.
        p: pacing rate p (float64, probability).
        budget_micros: daily budget (int64, micros).
        billed_micros: billed on the day (int64, micros).
        committed_micros: billed + in flight + live slices (int64, micros), as
            :meth:`adfunnel.budget.day_rows.CampaignDay.committed` counts it.
        lam: bid multiplier λ (float64, ≥ 1; 1 for campaigns that are not automatic);
            None: not given (read as 1).
    """

    campaign_id: np.ndarray
    state: np.ndarray
    p: np.ndarray
    budget_micros: np.ndarray
    billed_micros: np.ndarray
    committed_micros: np.ndarray
    lam: np.ndarray | None = None

    def multipliers(self) -> np.ndarray:
        """λ of each campaign (ones when not given)."""
        return np.ones(len(self.campaign_id)) if self.lam is None else self.lam

    def __len__(self) -> int:
        return len(self.campaign_id)

    @classmethod
    def from_status(cls, rows: Sequence[Mapping[str, Any]]) -> BudgetSnapshot:
        """From ``BudgetServiceProcess.status()`` records (``campaign_id``, ``state``,
        ``p``, ``budget_micros``, ``billed_micros``, ``committed_micros``; ``lam``, 1
        where missing).

        Raises:
            ValueError: a state that is not one of :data:`STATE_NAMES`.
        """
        def ints(key: str) -> np.ndarray:
            return np.array([int(r[key]) for r in rows], dtype=np.int64)

        return cls(ints("campaign_id"),
                   np.array([STATE_NAMES.index(str(r["state"])) for r in rows], dtype=np.int8),
                   np.array([float(r["p"]) for r in rows], dtype=np.float64),
                   ints("budget_micros"), ints("billed_micros"), ints("committed_micros"),
                   np.array([float(r.get("lam", 1.0)) for r in rows], dtype=np.float64))
