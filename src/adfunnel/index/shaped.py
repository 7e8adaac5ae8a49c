"""One index per creative shape, so retrieval hands over only ads that fit the request.

A slot takes an ad only of its own format and size; at catalogue scale most retrieved
ads did not fit (74 % in a profile of the ``real`` workload). :class:`ShapedIndex`
keeps one inner index (a :class:`~adfunnel.index.conjunction.ConjunctionIndex` by
default) per shape key, e.g. ``("banner", 300, 250)``, and answers two queries:

- :meth:`query_shapes`: the best ``limit`` ads among the given shapes (the columnar
  decider's retrieval: every candidate can fill a slot, and the index's early
  termination stops after ``limit`` of those);
- :meth:`query`: the best ``limit`` ads of every shape — exactly the single index's
  answer (the per-candidate reference path and explain requests, which name the ads
  that do not fit).

Each inner index orders by (static score descending, ad id ascending); results from
several shapes are merged in that same order, so the best ``limit`` of the union is
the best ``limit`` of each shape's best ``limit``, merged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable

import numpy as np

from adfunnel.dense import DENSE_IDS, DenseIds
from adfunnel.index.base import DEFAULT_LIMIT, AdIndex, ArrayRetrieval, Retrieval, query_array
from adfunnel.index.conjunction import ConjunctionIndex
from adfunnel.targeting.evaluate import RequestAttributes
from adfunnel.targeting.expr import Expr

Shape = Hashable


class ShapedIndex:
    """:class:`~adfunnel.index.base.AdIndex` partitioned by shape (module docstring).

    ``shape_of(ad_id)`` names an ad's shape when it is written (the catalogue holds the
    ad record before it indexes it); ``factory`` makes an inner index.
    Thread safety: as the inner indexes; writes serialise on one lock.
    """

    def __init__(self, shape_of: Callable[[int], Shape],
                 factory: Callable[[], AdIndex] = ConjunctionIndex) -> None:
        self._shape_of = shape_of
        self._factory = factory
        self._inner: dict[Shape, AdIndex] = {}  # replaced, never mutated: readers copy-free
        self._shape: dict[int, Shape] = {}
        self._scores = DenseIds(np.float64, np.nan)
        self._big_scores: dict[int, float] = {}  # ids beyond DENSE_IDS
        self._write = threading.Lock()

    # ---- reading ---------------------------------------------------------------
    @property
    def version(self) -> int:
        return sum(ix.version for ix in self._inner.values())

    def __len__(self) -> int:
        return sum(len(ix) for ix in self._inner.values())

    def shapes(self) -> list[Shape]:
        return list(self._inner)

    def query(self, request: RequestAttributes, limit: int = DEFAULT_LIMIT) -> Retrieval:
        """The best ``limit`` matching ads of every shape (the single index's answer)."""
        r = self.query_array(request, limit)
        return Retrieval(r.ad_ids.tolist(), r.version, truncated=r.truncated)

    def query_array(self, request: RequestAttributes, limit: int = DEFAULT_LIMIT) -> ArrayRetrieval:
        return self.query_shapes(request, None, limit)

    def query_shapes(self, request: RequestAttributes, shapes: Iterable[Shape] | None,
                     limit: int = DEFAULT_LIMIT) -> ArrayRetrieval:
        """The best ``limit`` matching ads whose shape is in ``shapes`` (None: every shape),
        ordered by (static score descending, ad id ascending)."""
        inner = self._inner
        chosen = inner.values() if shapes is None else [
            inner[s] for s in dict.fromkeys(shapes) if s in inner]
        parts, version, truncated = [], 0, False
        for ix in chosen:
            r = query_array(ix, request, limit)
            version += r.version
            truncated |= r.truncated
            if len(r.ad_ids):
                parts.append(r.ad_ids)
        if shapes is not None:
            version = self.version  # every decision records the whole index's version
        if not parts:
            return ArrayRetrieval(np.zeros(0, dtype=np.int64), version, truncated)
        if len(parts) == 1:
            return ArrayRetrieval(parts[0], version, truncated)
        ids = np.concatenate(parts)
        ids = ids[np.lexsort((ids, -self._score_of(ids)))]
        return ArrayRetrieval(ids[:limit], version, truncated or len(ids) > limit)

    def _score_of(self, ids: np.ndarray) -> np.ndarray:
        scores = self._scores.get(ids)
        big = ids >= DENSE_IDS
        if big.any():
            scores[big] = [self._big_scores[int(a)] for a in ids[big]]
        return scores

    # ---- writing ---------------------------------------------------------------
    def build(self, ads: Iterable[tuple[int, Expr, float]]) -> None:
        """Replace the whole content (one bulk build per shape)."""
        groups: dict[Shape, list[tuple[int, Expr, float]]] = {}
        for item in ads:
            groups.setdefault(self._shape_of(item[0]), []).append(item)
        with self._write:
            inner: dict[Shape, AdIndex] = {}
            self._shape = {}
            for shape, items in groups.items():
                ix = self._inner.get(shape) or self._factory()
                ix.build(items)
                inner[shape] = ix
                for ad_id, _, score in items:
                    self._shape[ad_id] = shape
                    self._set_score(ad_id, score)
            for shape, ix in self._inner.items():
                if shape not in inner:
                    ix.build([])
                    inner[shape] = ix
            self._inner = inner

    def upsert(self, ad_id: int, expr: Expr, static_score: float = 0.0) -> None:
        self.upsert_many([(ad_id, expr, static_score)])

    def upsert_many(self, ads: Iterable[tuple[int, Expr, float]]) -> None:
        """Add or replace ads; an ad whose shape changed leaves its old shape's index."""
        items = list(ads)
        with self._write:
            groups: dict[Shape, list[tuple[int, Expr, float]]] = {}
            moved: dict[Shape, list[int]] = {}
            for item in items:
                shape = self._shape_of(item[0])
                old = self._shape.get(item[0])
                if old is not None and old != shape:
                    moved.setdefault(old, []).append(item[0])
                groups.setdefault(shape, []).append(item)
            inner = dict(self._inner)
            for shape, gone in moved.items():  # first: a reader never sees an ad twice
                inner[shape].remove_many(gone)
            for shape, group in groups.items():
                ix = inner.get(shape)
                if ix is None:
                    ix = inner[shape] = self._factory()
                for ad_id, _, score in group:
                    self._set_score(ad_id, score)
                ix.upsert_many(group)
                for ad_id, _, _ in group:
                    self._shape[ad_id] = shape
            self._inner = inner

    def remove(self, ad_id: int) -> None:
        self.remove_many([ad_id])

    def remove_many(self, ad_ids: Iterable[int]) -> None:
        with self._write:
            by_shape: dict[Shape, list[int]] = {}
            for ad_id in ad_ids:
                shape = self._shape.pop(int(ad_id), None)
                if shape is not None:
                    by_shape.setdefault(shape, []).append(int(ad_id))
            for shape, gone in by_shape.items():
                self._inner[shape].remove_many(gone)

    def _set_score(self, ad_id: int, score: float) -> None:
        if 0 <= ad_id < DENSE_IDS:
            self._scores.set(ad_id, score)
        else:
            self._big_scores[ad_id] = score
