"""pCTR as a smoothed click rate per (ad, placement), learned from billed events.

pCTR = (clicks + m·n) / (impressions + n): a Beta prior with mean ``m`` (the prior
click rate) and strength ``n`` pseudo-impressions, updated by billed impressions and
clicks only (invalid traffic never reaches it). Until the click model exists this is
the serving path's pCTR; it is not a constant: it moves with every billed event.
"""

from __future__ import annotations

import threading
from collections import defaultdict


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
        self._lock = threading.Lock()

    def pctr(self, ad_id: int, placement: str) -> float:
        """Predicted click probability of one impression of ``ad_id`` on ``placement``."""
        imps, clicks = self._counts.get((ad_id, placement), (0, 0))
        return (clicks + self.prior * self.strength) / (imps + self.strength)

    def observe_impression(self, ad_id: int, placement: str) -> None:
        with self._lock:
            self._counts[(ad_id, placement)][0] += 1

    def observe_click(self, ad_id: int, placement: str) -> None:
        with self._lock:
            self._counts[(ad_id, placement)][1] += 1
