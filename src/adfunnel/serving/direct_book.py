"""The ad server's side of direct selling: which campaigns are sponsorship or guaranteed
lines (:class:`DirectBook`, kept by the catalogue), and the sample of guaranteed lines'
eligible supply that orders them (:class:`GuaranteedSupply`, kept by the decider).

Both are read on the request path without I/O. With no direct line in the catalogue the
deciders never look further (:meth:`DirectBook.any`), so auction-only serving is bit
for bit what it was.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping

import numpy as np

from adfunnel.campaigns.model import Campaign
from adfunnel.pacing.allocation import Allocation, contention_order, high_water_mark
from adfunnel.serving.tiers import KIND_AUCTION, KIND_OF, share_of

_EMPTY_IDS = np.zeros(0, dtype=np.int64)


class DirectBook:
    """Campaign id -> tier code and share, for the campaigns that sell direct.

    ``put`` takes every campaign the catalogue takes (new or changed); readers use
    :meth:`any` and :meth:`kinds` without a lock: the arrays are replaced, never
    changed in place."""

    def __init__(self) -> None:
        self._kind: dict[int, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self.ids = _EMPTY_IDS  # sorted campaign ids of direct lines
        self.kind = np.zeros(0, dtype=np.int8)
        self.share = np.zeros(0, dtype=np.float64)

    def put(self, campaigns: Iterable[Campaign]) -> None:
        with self._lock:
            held = dict(self._kind)
            changed = False
            for c in campaigns:
                k = KIND_OF[c.priority]
                if k == KIND_AUCTION:
                    changed |= held.pop(c.id, None) is not None
                else:
                    held[c.id] = (k, share_of(c))
                    changed = True
            if not changed:
                return
            self._kind = held
            ids = np.array(sorted(held), dtype=np.int64)
            kind = np.array([held[i][0] for i in ids.tolist()], dtype=np.int8)
            share = np.array([held[i][1] for i in ids.tolist()], dtype=np.float64)
            self.ids, self.kind, self.share = ids, kind, share

    def any(self) -> bool:
        """Whether any campaign sells direct (else the tiers are skipped)."""
        return len(self.ids) > 0

    def kinds(self, campaign_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tier code int8, share float64) per campaign id (auction: 0, share 1)."""
        ids, kind, share = self.ids, self.kind, self.share  # one consistent read
        at = np.searchsorted(ids, campaign_ids)
        at = np.minimum(at, max(len(ids) - 1, 0))
        hit = (ids[at] == campaign_ids) if len(ids) else np.zeros(len(campaign_ids), bool)
        return (np.where(hit, kind[at] if len(ids) else 0, KIND_AUCTION).astype(np.int8),
                np.where(hit, share[at] if len(ids) else 1.0, 1.0))

    def kind_of(self, campaign_id: int) -> tuple[int, float]:
        return self._kind.get(campaign_id, (KIND_AUCTION, 1.0))


class GuaranteedSupply:
    """The eligible supply of guaranteed lines as this ad server sees it: per decision,
    the set of guaranteed lines that could serve the request (status, flight, daypart,
    targeting and shape passed; before budget and pacing).

    Counts per line give High Water Mark's serving order (:meth:`order`: least eligible
    supply first, :func:`~adfunnel.pacing.allocation.contention_order`); a bounded
    reservoir sample of the sets (Vitter's algorithm R, seeded, so two deciders fed the
    same decisions hold the same sample) gives the whole plan (:meth:`plan`), whose alpha
    and p the budget service may seed a line's pacing rate with
    (:func:`~adfunnel.pacing.allocation.seed_pacing_rates`). Thread-safe.

    Every ``half_life`` requests the counts are halved, so the order follows a line
    whose targeting or traffic changed (and a new line, which starts at 0 and is served
    first meanwhile, catches up) instead of a server's whole history."""

    def __init__(self, sample_size: int = 2048, seed: int = 0,
                 half_life: int = 50_000) -> None:
        self.sample_size = sample_size
        self.half_life = half_life
        self.counts: dict[int, int] = {}
        self.requests = 0  # decisions that had a guaranteed line eligible
        self._sample: list[frozenset[int]] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def observe(self, line_ids: Iterable[int]) -> None:
        """One request for which ``line_ids`` (guaranteed lines) were eligible."""
        ids = frozenset(line_ids)
        if not ids:
            return
        with self._lock:
            self.requests += 1
            for j in ids:
                self.counts[j] = self.counts.get(j, 0) + 1
            if self.requests % self.half_life == 0:
                self.counts = {j: c // 2 for j, c in self.counts.items() if c > 1}
            if len(self._sample) < self.sample_size:
                self._sample.append(ids)
            else:
                k = self._rng.randrange(self.requests)
                if k < self.sample_size:
                    self._sample[k] = ids

    def order(self, line_ids: Iterable[int]) -> list[int]:
        """``line_ids`` in High Water Mark's serving order (least eligible supply first)."""
        with self._lock:
            return contention_order({j: self.counts.get(j, 0) for j in line_ids})

    def plan(self, demand: Mapping[int, float]) -> Allocation:
        """The High Water Mark plan over the sample, scaled to every request observed:
        ``demand`` per line in requests (impressions) over the same span."""
        with self._lock:
            sample, n = list(self._sample), self.requests
        weight = n / len(sample) if sample else 0.0
        return high_water_mark([(s, weight) for s in sample], demand)
