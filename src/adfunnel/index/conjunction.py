"""The conjunction index: retrieval of matching ads by boolean targeting (DESIGN.md §The funnel, 2).

Source: S. E. Whang, H. Garcia-Molina, C. Brower, J. Shanmugasundaram, S. Vassilvitskii,
E. Vee, R. Yerneni, "Indexing Boolean Expressions", VLDB 2009. Each ad's targeting is
compiled to DNF (:func:`adfunnel.targeting.dnf.compile_dnf`); each conjunction is
indexed under its ``∈`` terms' (attribute, value) keys and carries its size K; a
conjunction matches when the request hits all K of its ``∈`` terms and none of
its ``∉`` terms; K = 0 conjunctions (the paper's Z entry) match unless a ``∉``
term rejects them. Where the paper walks K-partitioned posting lists with
cursors, this index evaluates windows of conjunction ids with word-wise bitmap
algebra (dense posting groups are stored as bitmaps; see
:mod:`adfunnel.index.segment`). Pure: no I/O.

Semantics equal :func:`adfunnel.targeting.evaluate.matches` exactly, for any
request (attribute -> set of values, several values allowed for any attribute):

- ``a in S`` holds when some request value of ``a`` is in S; it is **false** when
  the request lacks ``a``;
- ``a not_in S`` holds when no request value of ``a`` is in S; it is **true** when
  the request lacks ``a``.

Geo is hierarchical only through the request: it carries ``geo.country``,
``geo.region`` and ``geo.city`` as separate attributes, so a term on any level
is an ordinary term. Attribute names are not restricted here (``parse_expr`` does
that); the index accepts any.

Layout: one large immutable :class:`~adfunnel.index.segment.Segment` (*main*,
columnar numpy arrays), one small *delta* segment rebuilt on each write, and a
per-ad ``alive`` mask over main (the tombstones). A write builds a new
:class:`~adfunnel.index.snapshot.Snapshot` and swaps it in with one assignment; a query reads
``self._snap`` once, so it sees one consistent version, returned in
``Retrieval.version``. When the delta holds more than ``delta_limit`` ads it is
merged into a new main on a background thread (``background_merge=True``, the
default): the writer returns at once, readers keep reading, later writes go to
the delta as usual, and when the new main is ready it is swapped in under the
write lock with the ads written meanwhile hidden in it and carried over in a new
delta; that swap keeps the version number (the content is unchanged). With
``background_merge=False`` the writer that passes the limit merges synchronously
(cost O(main)). :meth:`merge` merges at once (waiting for a merge in flight). A
write costs O(delta + ads in main) (the alive mask is copied).

Broad ads: conjunction ids run best static score first, and a query reads them
in windows only until more than ``limit`` distinct ads matched, so long posting
lists are read only as far as needed. A narrow ad is never crowded out: it is
returned whenever fewer than ``limit`` matching ads score above it (ties broken
by ad id, as :class:`~adfunnel.index.scan.ScanIndex` does).

Memory: per ad 8 B id + 8 B score + 8 B ad id in rank order + 8 B rank maps +
1 B alive; per conjunction 4 B ad row + 4 B ad rank + 1 B K + 1 bit per slot
below the segment's largest K; per sparse ``∈``/``∉`` entry 4 B; per dense
group 1 bit per conjunction (no more than its list would take); plus one
dictionary entry per distinct (attribute, value). Updates copy the alive mask
(1 B per ad) and rebuild the small delta.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable

import numpy as np
from prometheus_client import Counter

from adfunnel.index.base import DEFAULT_LIMIT, ArrayRetrieval, Retrieval
from adfunnel.index.segment import Segment
from adfunnel.index.snapshot import Snapshot, delta_table, hide, new_main
from adfunnel.index.table import TableBuilder, concat_tables
from adfunnel.targeting.dnf import Conjunction, compile_dnf
from adfunnel.targeting.evaluate import RequestAttributes
from adfunnel.targeting.expr import Expr

#: Queries that matched more ads than their limit (the rest were cut).
TRUNCATED = Counter(
    "adfunnel_index_truncated_total",
    "Index queries that matched more ads than the limit; only the best were returned.",
)

#: Delta size (ads) above which a write merges the delta into main.
DEFAULT_DELTA_LIMIT = 2048

LOG = logging.getLogger(__name__)


def _check_score(score: float) -> float:
    score = float(score)
    if not math.isfinite(score):
        raise ValueError(f"static score must be finite, got {score!r}")
    return score


class ConjunctionIndex:
    """:class:`~adfunnel.index.base.AdIndex` over compiled DNF targeting (see module docstring).

    Thread safety: any number of threads may :meth:`query` while others write;
    writes serialise on one lock. No query raises or sees a half-applied write.
    """

    def __init__(
        self, *, delta_limit: int = DEFAULT_DELTA_LIMIT, background_merge: bool = True
    ) -> None:
        self._write = threading.Lock()
        self._delta_limit = delta_limit
        self._background = background_merge
        self._snap = new_main(Segment.empty(), version=0)
        # In-flight background merge: its thread, the ads written since its base
        # snapshot, and the epoch it belongs to (build/merge bump it: result dropped).
        self._merge_thread: threading.Thread | None = None
        self._touched: set[int] | None = None
        self._epoch = 0

    # ---- reading ---------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._snap.version

    def __len__(self) -> int:
        snap = self._snap
        return snap.n_main_alive + len(snap.delta_ads)

    def nbytes(self) -> int:
        """Bytes held in numpy arrays by the current version (main + delta + tombstones)."""
        snap = self._snap
        return (
            snap.main.nbytes()
            + snap.delta.nbytes()
            + snap.alive.nbytes
            + snap.main_sorted_ids.nbytes
            + snap.main_sorted_rows.nbytes
        )

    def query(self, request: RequestAttributes, limit: int = DEFAULT_LIMIT) -> Retrieval:
        """The ads whose targeting ``request`` satisfies, best static score first.

        ``request`` maps attribute -> set of values. Returns at most ``limit`` ad ids
        ordered by (static score descending, ad id ascending) — the same order as
        :class:`~adfunnel.index.scan.ScanIndex` — with ``truncated`` True (and the
        ``adfunnel_index_truncated_total`` counter incremented) when more matched.
        """
        r = self.query_array(request, limit)
        return Retrieval(r.ad_ids.tolist(), r.version, truncated=r.truncated)

    def query_array(self, request: RequestAttributes, limit: int = DEFAULT_LIMIT) -> ArrayRetrieval:
        """:meth:`query` with the ad ids as an int64 array (the columnar decider's input)."""
        snap = self._snap
        ids_parts: list[np.ndarray] = []
        row_parts: list[np.ndarray] = []
        segs: list[Segment] = []
        total = 0
        main_alive = None if snap.n_main_alive == len(snap.alive) else snap.alive
        for seg, alive in ((snap.main, main_alive), (snap.delta, None)):
            if seg.n_conjunctions == 0:
                continue
            ranks = seg.match(seg.key_ids_of(request), alive, limit)
            if not len(ranks):
                continue
            total += len(ranks)
            ranks = ranks[: limit + 1]
            ids_parts.append(seg.rank_ids[ranks])
            row_parts.append(ranks)  # scores are looked up only when two lists merge
            segs.append(seg)
        if not ids_parts:
            return ArrayRetrieval(np.zeros(0, dtype=np.int64), snap.version, truncated=False)
        if len(ids_parts) == 1:
            ids = ids_parts[0]
        else:  # main and delta hold disjoint live ads: merge the two ranked lists
            ids = np.concatenate(ids_parts)
            scores = np.concatenate(
                [g.scores[g.rank_row[r]] for g, r in zip(segs, row_parts, strict=True)]
            )
            ids = ids[np.lexsort((ids, -scores))]
        truncated = total > limit
        if truncated:
            TRUNCATED.inc()
        return ArrayRetrieval(ids[:limit].astype(np.int64, copy=False), snap.version,
                              truncated=truncated)

    # ---- writing ---------------------------------------------------------------

    def build(self, ads: Iterable[tuple[int, Expr, float]]) -> None:
        """Replace the whole content by ``ads`` (ad id, targeting, static score) in one version.

        The bulk path: each distinct expression (by identity, then by value) is
        compiled once; the columns are built with numpy. Ad ids must be unique.

        Raises:
            TargetingError: an expression's DNF is too large (nothing is replaced).
            ValueError: a duplicate ad id or a non-finite score.
        """
        builder = TableBuilder()
        by_id: dict[int, tuple[Expr, int]] = {}
        by_value: dict[Expr, int] = {}
        template = builder.template
        add_id, add_score, add_tmpl = (
            builder.ad_ids.append,
            builder.scores.append,
            builder.ad_tmpl.append,
        )
        for ad_id, expr, score in ads:
            hit = by_id.get(id(expr))
            if hit is not None and hit[0] is expr:
                t = hit[1]
            else:
                t = by_value.get(expr)
                if t is None:
                    t = by_value[expr] = template(compile_dnf(expr))
                by_id[id(expr)] = (expr, t)
            add_id(ad_id)
            add_score(score)
            add_tmpl(t)
        sorted_ids = np.sort(np.frombuffer(builder.ad_ids, dtype=np.int64))
        if len(sorted_ids) > 1 and bool((sorted_ids[1:] == sorted_ids[:-1]).any()):
            raise ValueError("duplicate ad ids in build()")
        del sorted_ids
        if not np.isfinite(np.frombuffer(builder.scores, dtype=np.float64)).all():
            raise ValueError("static scores must be finite")
        main = Segment.from_builder(builder)
        with self._write:
            self._drop_merge()
            self._snap = new_main(main, self._snap.version + 1)

    def upsert(self, ad_id: int, expr: Expr, static_score: float = 0.0) -> None:
        """Add or replace one ad.

        Raises:
            TargetingError: the targeting's DNF is too large (the index is unchanged).
            ValueError: a non-finite score.
        """
        self.upsert_many([(ad_id, expr, static_score)])

    def upsert_many(self, ads: Iterable[tuple[int, Expr, float]]) -> None:
        """Add or replace several ads in one version (all compiled before any change)."""
        compiled = [(int(a), tuple(compile_dnf(e)), _check_score(s)) for a, e, s in ads]
        if not compiled:
            return
        with self._write:
            snap = self._snap
            alive = hide(snap, [a for a, _, _ in compiled])
            delta_ads = dict(snap.delta_ads)
            for ad_id, conjs, score in compiled:
                delta_ads[ad_id] = (conjs, score)
            self._publish(snap, alive, delta_ads, [a for a, _, _ in compiled])

    def remove(self, ad_id: int) -> None:
        """Remove one ad; an unknown ad is a no-op (the version does not change)."""
        self.remove_many([ad_id])

    def remove_many(self, ad_ids: Iterable[int]) -> None:
        """Remove several ads (e.g. a whole campaign's) in one version; unknown ids are ignored."""
        ids = [int(a) for a in ad_ids]
        with self._write:
            snap = self._snap
            alive = hide(snap, ids)
            delta_ads = snap.delta_ads
            if any(a in delta_ads for a in ids):
                delta_ads = {a: v for a, v in delta_ads.items() if a not in set(ids)}
            if alive is snap.alive and delta_ads is snap.delta_ads:
                return
            self._publish(snap, alive, delta_ads, ids)

    def merge(self) -> None:
        """Fold the delta and the tombstones into a new main segment (one new version).

        Synchronous: waits for a background merge in flight, then merges what is left.
        """
        thread = self._merge_thread
        if thread is not None:
            thread.join()
        with self._write:
            self._drop_merge()
            snap = self._snap
            table = concat_tables(snap.main.to_table(snap.alive), delta_table(snap.delta_ads))
            self._snap = new_main(Segment.build(table), snap.version + 1)

    # ---- internals -------------------------------------------------------------

    def _publish(
        self,
        snap: Snapshot,
        alive: np.ndarray,
        delta_ads: dict[int, tuple[tuple[Conjunction, ...], float]],
        ad_ids: list[int],
    ) -> None:
        """Swap in the next version (caller holds the write lock); ``ad_ids`` were written."""
        n_alive = snap.n_main_alive if alive is snap.alive else int(alive.sum())
        delta = (
            snap.delta if delta_ads is snap.delta_ads else Segment.build(delta_table(delta_ads))
        )
        nxt = Snapshot(
            version=snap.version + 1,
            main=snap.main,
            alive=alive,
            main_sorted_ids=snap.main_sorted_ids,
            main_sorted_rows=snap.main_sorted_rows,
            n_main_alive=n_alive,
            delta_ads=delta_ads,
            delta=delta,
            delta_alive=np.ones(len(delta.ad_ids), dtype=bool),
        )
        if self._touched is not None:
            self._touched.update(ad_ids)
        if len(delta_ads) > self._delta_limit:
            if not self._background:
                table = concat_tables(snap.main.to_table(alive), delta_table(delta_ads))
                nxt = new_main(Segment.build(table), snap.version + 1)
            elif self._merge_thread is None:
                self._start_merge(nxt)
        self._snap = nxt

    # ---- background merge ------------------------------------------------------

    def _drop_merge(self) -> None:
        """Forget the merge in flight: its result will be dropped (caller holds the lock)."""
        self._epoch += 1
        self._merge_thread, self._touched = None, None

    def _start_merge(self, base: Snapshot) -> None:
        """Merge ``base`` into a new main on a thread (caller holds the write lock)."""
        self._touched = set()
        thread = threading.Thread(
            target=self._merge_in_background,
            args=(base, self._epoch),
            name="adfunnel-index-merge",
            daemon=True,
        )
        # started before it is published: ``merge`` reads ``_merge_thread`` without the
        # lock and joins it (a thread not yet started cannot be joined); the thread
        # cannot clear it before we return, as it needs the write lock we hold
        thread.start()
        self._merge_thread = thread

    def _merge_in_background(self, base: Snapshot, epoch: int) -> None:
        """Build a main from ``base``, then swap it in under the lock with the writes since.

        Ads written after ``base`` (``self._touched``) are hidden in the new main and
        carried over in a new delta, so the swapped-in snapshot holds exactly the
        current content: it keeps the current version number (nothing was written).
        """
        try:
            table = concat_tables(base.main.to_table(base.alive), delta_table(base.delta_ads))
            fresh = new_main(Segment.build(table), base.version)
        except Exception:  # pragma: no cover - e.g. memory; the next write retries
            LOG.exception("background index merge failed")
            with self._write:
                if self._epoch == epoch:
                    self._merge_thread, self._touched = None, None
            return
        with self._write:
            if self._epoch != epoch or self._touched is None:
                return
            cur, touched = self._snap, sorted(self._touched)
            self._merge_thread, self._touched = None, None
            alive = hide(fresh, touched)
            delta_ads = {a: cur.delta_ads[a] for a in touched if a in cur.delta_ads}
            delta = Segment.build(delta_table(delta_ads)) if delta_ads else fresh.delta
            self._snap = Snapshot(
                version=cur.version,
                main=fresh.main,
                alive=alive,
                main_sorted_ids=fresh.main_sorted_ids,
                main_sorted_rows=fresh.main_sorted_rows,
                n_main_alive=int(alive.sum()),
                delta_ads=delta_ads,
                delta=delta,
                delta_alive=np.ones(len(delta.ad_ids), dtype=bool),
            )
            if len(delta_ads) > self._delta_limit:
                self._start_merge(self._snap)
