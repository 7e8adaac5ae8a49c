"""Growable numpy arrays indexed by an id (campaign or ad ids are dense sequences)."""

from __future__ import annotations

import numpy as np
from numba import njit

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
        if not len(campaign_ids):
            return
        top = int(campaign_ids.max())
        if campaign_ids.min() < 0 or top >= DENSE_IDS:
            keep = (campaign_ids >= 0) & (campaign_ids < DENSE_IDS)
            campaign_ids = campaign_ids[keep]
            if isinstance(values, np.ndarray):
                values = values[keep]
            if not len(campaign_ids):
                return
            top = int(campaign_ids.max())
        self.reserve(top + 1)
        self.values[campaign_ids] = values

    def reserve(self, size: int) -> None:
        """Grow the array to hold ids below ``size`` (at most ``DENSE_IDS``)."""
        size = min(size, DENSE_IDS)
        if size > len(self.values):
            self.set(size - 1, self.fill)

    def add_one(self, campaign_ids: np.ndarray) -> None:
        """Add 1 at each of ``campaign_ids`` (distinct, dense; numeric arrays)."""
        if len(campaign_ids):
            self.reserve(int(campaign_ids.max()) + 1)
            _add_one(self.values, campaign_ids)

    def get_one(self, campaign_id: int) -> float | int:
        """The value at one id (the fill when never set or out of range)."""
        vals = self.values
        return vals.item(campaign_id) if 0 <= campaign_id < len(vals) else self.fill

    def get(self, campaign_ids: np.ndarray) -> np.ndarray:
        """Values at ``campaign_ids`` (the fill for ids never set or out of range)."""
        vals = self.values
        return _take(vals, campaign_ids.astype(np.int64, copy=False), vals.dtype.type(self.fill))


@njit(cache=True, nogil=True)
def _take(values: np.ndarray, ids: np.ndarray, fill: float | int) -> np.ndarray:
    out = np.empty(len(ids), values.dtype)
    n = len(values)
    for i in range(len(ids)):
        c = ids[i]
        out[i] = values[c] if 0 <= c < n else fill
    return out


@njit(cache=True, nogil=True)
def _add_one(values: np.ndarray, ids: np.ndarray) -> None:
    for c in ids:
        values[c] += 1


#: The value types DenseIds holds in the package (one compiled kernel each).
_DTYPES = (np.int8, np.int32, np.int64, np.float64)


def warm_up() -> None:
    """Compile (or load from the cache) the kernels for every value type held."""
    ids = np.zeros(1, dtype=np.int64)
    for dtype in _DTYPES:
        d = DenseIds(dtype, 0)
        d.get(ids)
        if dtype is not np.float64:
            d.add_one(ids)
