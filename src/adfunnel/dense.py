"""Growable numpy arrays indexed by an id (campaign or ad ids are dense sequences)."""

from __future__ import annotations

import numpy as np

#: Ids below this are held in dense per-id arrays; callers treat larger ids separately.
DENSE_IDS = 1 << 24

__all__ = ["DENSE_IDS", "DenseIds"]


class DenseIds:
    """A growable array indexed by campaign id (ids < ``DENSE_IDS``), with a default."""

    def __init__(self, dtype: type, fill: float | int) -> None:
        self.fill = fill
        self.values = np.full(1024, fill, dtype=dtype)

    def set(self, campaign_id: int, value: float | int) -> None:
        if not 0 <= campaign_id < DENSE_IDS:
            return
        if campaign_id >= len(self.values):
            grown = np.full(max(campaign_id + 1, 2 * len(self.values)), self.fill,
                            dtype=self.values.dtype)
            grown[: len(self.values)] = self.values
            self.values = grown  # one reference swap: readers see the old or the new
        self.values[campaign_id] = value

    def set_many(self, campaign_ids: np.ndarray, values: np.ndarray | float | int) -> None:
        """``set`` at many ids at once (ids ≥ ``DENSE_IDS`` are skipped)."""
        keep = (campaign_ids >= 0) & (campaign_ids < DENSE_IDS)
        if not keep.all():
            campaign_ids = campaign_ids[keep]
            if isinstance(values, np.ndarray):
                values = values[keep]
        if not len(campaign_ids):
            return
        top = int(campaign_ids.max())
        if top >= len(self.values):
            self.set(top, self.fill)  # grows the array
        self.values[campaign_ids] = values

    def get_one(self, campaign_id: int) -> float | int:
        """The value at one id (the fill when never set or out of range)."""
        vals = self.values
        return vals.item(campaign_id) if 0 <= campaign_id < len(vals) else self.fill

    def get(self, campaign_ids: np.ndarray) -> np.ndarray:
        """Values at ``campaign_ids`` (the fill for ids never set or out of range)."""
        vals = self.values
        inside = (campaign_ids >= 0) & (campaign_ids < len(vals))
        if inside.all():
            return vals[campaign_ids]
        out = np.full(len(campaign_ids), self.fill, dtype=vals.dtype)
        out[inside] = vals[campaign_ids[inside]]
        return out
