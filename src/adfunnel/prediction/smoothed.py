"""pCTR as a smoothed click rate per (ad, placement), learned from billed events.

pCTR = (clicks + m·n) / (impressions + n): a Beta prior with mean ``m`` (the prior
click rate) and strength ``n`` pseudo-impressions, updated by billed impressions and
clicks only (invalid traffic never reaches it). Until the click model exists this is
the serving path's pCTR; it is not a constant: it moves with every billed event.

Rotation (DESIGN.md §The funnel, 3): a campaign's creatives rotate evenly until the
model can tell them apart. :func:`rotation_pool` says which creatives cannot be told
apart from the best one; :meth:`SmoothedCtr.campaign_pctrs` gives those the pooled
estimate, so their totals tie exactly and the auction's uniform tie-break rotates them.
Without it, one lucky click would make one of identical creatives win for good.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from adfunnel.dense import DENSE_IDS, DenseIds

#: Two-sided 95 % normal quantile: creatives whose posterior mean is within this many
#: standard errors of their difference from the best one's cannot be told apart.
ROTATION_Z = 1.96


def rotation_pool(
    counts: Sequence[tuple[int, int]], prior: float, strength: float, z: float = ROTATION_Z
) -> list[int]:
    """Indices of the creatives the model cannot tell apart from the best one.

    ``counts`` holds (billed impressions, billed clicks) per creative. Each creative's
    click rate has the posterior Beta(a, b), a = clicks + prior·strength,
    b = impressions − clicks + (1 − prior)·strength, with mean μ = a / (a + b) and
    variance μ(1 − μ) / (a + b + 1). Creative i rotates with the best (highest μ) when
    μ_best − μ_i ≤ z·√(var_best + var_i) — a z-test on the difference of the posteriors
    (normal approximation). Identical counts always rotate; the best is always in.
    """
    stats = []
    for imps, clicks in counts:
        a = clicks + prior * strength
        n = max(imps, clicks) + strength
        mean = a / n
        stats.append((mean, mean * (1.0 - mean) / (n + 1.0)))
    if not stats:
        return []
    best_mean, best_var = max(stats)
    return [
        i for i, (mean, var) in enumerate(stats)
        if best_mean - mean <= z * math.sqrt(best_var + var)
    ]


class SmoothedCtr:
    """Thread-safe counts per (ad id, placement) with a Beta prior.

    ``prior`` is a probability in (0, 1); ``strength`` is pseudo-impressions (> 0).
    """

    def __init__(self, prior: float = 0.001, strength: float = 1_000.0) -> None:
        if not 0 < prior < 1 or strength <= 0:
            raise ValueError("prior must be in (0, 1) and strength > 0")
        self.prior = prior
        self.strength = strength
        self._counts: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
        # the same counts as arrays by ad id, per placement, for pctr_array
        self._dense: dict[str, tuple[DenseIds, DenseIds]] = {}
        self._lock = threading.Lock()

    def pctr(self, ad_id: int, placement: str) -> float:
        """Predicted click probability of one impression of ``ad_id`` on ``placement``."""
        imps, clicks = self._counts.get((ad_id, placement), (0, 0))
        return self._smooth(imps, clicks)

    def campaign_pctrs(self, ad_ids: Sequence[int], placement: str) -> list[float]:
        """pCTR of each of one campaign's creatives ``ad_ids`` on ``placement``, rotating.

        The creatives of :func:`rotation_pool` get their pooled estimate
        (Σ clicks + prior·strength) / (Σ impressions + strength): equal, since the model
        cannot tell them apart; the others keep their own :meth:`pctr`.
        """
        counts = [tuple(self._counts.get((ad, placement), (0, 0))) for ad in ad_ids]
        out = [self._smooth(imps, clicks) for imps, clicks in counts]
        pool = rotation_pool(counts, self.prior, self.strength)  # type: ignore[arg-type]
        if len(pool) > 1:
            pooled = self._smooth(sum(counts[i][0] for i in pool),
                                  sum(counts[i][1] for i in pool))
            for i in pool:
                out[i] = pooled
        return out

    def pctr_array(self, ad_ids: np.ndarray, placement: str) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`pctr` of each ad (float64[n], the same floats) and whether the ad has
        any count on ``placement`` (bool[n])."""
        dense = self._dense.get(placement)
        if dense is None:
            prior = self._smooth(0, 0)
            return np.full(len(ad_ids), prior), np.zeros(len(ad_ids), dtype=bool)
        imps, clicks = dense[0].get(ad_ids), dense[1].get(ad_ids)
        big = ad_ids >= DENSE_IDS
        if big.any():
            for i in np.flatnonzero(big):
                imps[i], clicks[i] = self._counts.get((int(ad_ids[i]), placement), (0, 0))
        pctr = (clicks + self.prior * self.strength) / (imps + self.strength)
        return pctr, (imps > 0) | (clicks > 0)

    def _smooth(self, imps: int, clicks: int) -> float:
        return (clicks + self.prior * self.strength) / (imps + self.strength)

    def observe_impression(self, ad_id: int, placement: str) -> None:
        with self._lock:
            counts = self._counts[(ad_id, placement)]
            counts[0] += 1
            self._mirror(ad_id, placement, counts)

    def observe_click(self, ad_id: int, placement: str) -> None:
        with self._lock:
            counts = self._counts[(ad_id, placement)]
            counts[1] += 1
            self._mirror(ad_id, placement, counts)

    def unobserve_impression(self, ad_id: int, placement: str) -> None:
        """Take back one :meth:`observe_impression` (its event was reversed as invalid
        traffic: IVT never trains the model); never below 0."""
        self._take_back(ad_id, placement, 0)

    def unobserve_click(self, ad_id: int, placement: str) -> None:
        """Take back one :meth:`observe_click` (see :meth:`unobserve_impression`)."""
        self._take_back(ad_id, placement, 1)

    def counts(self, ad_id: int, placement: str) -> tuple[int, int]:
        """(impressions, clicks) observed for ``ad_id`` on ``placement``."""
        with self._lock:
            imps, clicks = self._counts.get((ad_id, placement), (0, 0))
            return imps, clicks

    def _take_back(self, ad_id: int, placement: str, column: int) -> None:
        with self._lock:
            counts = self._counts.get((ad_id, placement))
            if counts is None or counts[column] == 0:
                return
            counts[column] -= 1
            self._mirror(ad_id, placement, counts)

    def _mirror(self, ad_id: int, placement: str, counts: list[int]) -> None:
        dense = self._dense.get(placement)
        if dense is None:
            dense = self._dense[placement] = (DenseIds(np.int64, 0), DenseIds(np.int64, 0))
        dense[0].set(ad_id, counts[0])
        dense[1].set(ad_id, counts[1])
