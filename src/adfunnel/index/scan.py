"""The reference index: evaluate every ad's expression directly.

Correct by construction and O(ads) per query; the conjunction index is checked
against it, and the benchmarks use it as the brute-force baseline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from adfunnel.index.base import DEFAULT_LIMIT, Retrieval
from adfunnel.targeting.evaluate import RequestAttributes, matches
from adfunnel.targeting.expr import Expr


class ScanIndex:
    """Brute-force :class:`~adfunnel.index.base.AdIndex` over an immutable snapshot.

    Writes build a new snapshot dict and swap it in, so a query iterates one
    consistent version without locks.
    """

    def __init__(self) -> None:
        self._ads: dict[int, tuple[Expr, float]] = {}
        self._version = 0
        self._write = threading.Lock()

    @property
    def version(self) -> int:
        return self._version

    def build(self, ads: Iterable[tuple[int, Expr, float]]) -> None:
        """Replace the whole content by ``ads`` (ad id, targeting, static score) in one version."""
        fresh = {ad_id: (expr, score) for ad_id, expr, score in ads}
        with self._write:
            self._ads, self._version = fresh, self._version + 1

    def upsert(self, ad_id: int, expr: Expr, static_score: float = 0.0) -> None:
        with self._write:
            ads = dict(self._ads)
            ads[ad_id] = (expr, static_score)
            self._ads, self._version = ads, self._version + 1

    def upsert_many(self, ads: Iterable[tuple[int, Expr, float]]) -> None:
        with self._write:
            new = dict(self._ads)
            new.update({ad_id: (expr, score) for ad_id, expr, score in ads})
            self._ads, self._version = new, self._version + 1

    def remove_many(self, ad_ids: Iterable[int]) -> None:
        with self._write:
            new = dict(self._ads)
            for ad_id in ad_ids:
                new.pop(ad_id, None)
            self._ads, self._version = new, self._version + 1

    def remove(self, ad_id: int) -> None:
        with self._write:
            if ad_id in self._ads:
                ads = dict(self._ads)
                del ads[ad_id]
                self._ads, self._version = ads, self._version + 1

    def query(self, request: RequestAttributes, limit: int = DEFAULT_LIMIT) -> Retrieval:
        ads, version = self._ads, self._version
        hits = [(score, ad_id) for ad_id, (expr, score) in ads.items() if matches(expr, request)]
        hits.sort(key=lambda h: (-h[0], h[1]))
        return Retrieval([a for _, a in hits[:limit]], version, truncated=len(hits) > limit)

    def __len__(self) -> int:
        return len(self._ads)
