"""One version of the conjunction index (:class:`Snapshot`): the large immutable *main*
segment, its per-ad ``alive`` mask (the tombstones), the small *delta* segment of the ads
written since, and the id -> row look-up over main; with the pure steps that make one —
a fresh snapshot over a new main (:func:`new_main`), the alive mask with ads hidden
(:func:`hide`) and the delta's table (:func:`delta_table`). The index that swaps them in
is :mod:`adfunnel.index.conjunction`. Pure: no I/O, no locks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adfunnel.index.segment import Segment
from adfunnel.index.table import ConjTable, TableBuilder
from adfunnel.targeting.dnf import Conjunction


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One consistent version: what a query reads with a single attribute access."""

    version: int
    main: Segment
    alive: np.ndarray  # bool[main ads]; False = removed or superseded by the delta
    main_sorted_ids: np.ndarray  # int64: main ad ids sorted, for id -> row look-ups
    main_sorted_rows: np.ndarray  # int64: row of each sorted id
    n_main_alive: int
    delta_ads: dict[int, tuple[tuple[Conjunction, ...], float]]
    delta: Segment
    delta_alive: np.ndarray  # bool[delta ads], all True


def new_main(main: Segment, version: int) -> Snapshot:
    """A snapshot whose main is ``main`` (every ad alive) and whose delta is empty."""
    order = np.argsort(main.ad_ids, kind="stable")
    return Snapshot(
        version=version,
        main=main,
        alive=np.ones(len(main.ad_ids), dtype=bool),
        main_sorted_ids=main.ad_ids[order],
        main_sorted_rows=order,
        n_main_alive=len(main.ad_ids),
        delta_ads={},
        delta=Segment.empty(),
        delta_alive=np.ones(0, dtype=bool),
    )


def hide(snap: Snapshot, ad_ids: list[int]) -> np.ndarray:
    """The alive mask with ``ad_ids`` cleared (the same array when nothing changes)."""
    if not len(snap.main_sorted_ids) or not ad_ids:
        return snap.alive
    ids = np.asarray(ad_ids, dtype=np.int64)
    pos = np.searchsorted(snap.main_sorted_ids, ids)
    pos = pos[pos < len(snap.main_sorted_ids)]
    pos = pos[np.isin(snap.main_sorted_ids[pos], ids)]
    rows = snap.main_sorted_rows[pos]
    rows = rows[snap.alive[rows]]
    if not len(rows):
        return snap.alive
    alive = snap.alive.copy()
    alive[rows] = False
    return alive


def delta_table(delta_ads: dict[int, tuple[tuple[Conjunction, ...], float]]) -> ConjTable:
    """The table of the delta's ads (ad id -> its conjunctions and static score)."""
    builder = TableBuilder()
    for ad_id, (conjs, score) in delta_ads.items():
        builder.add(ad_id, builder.template(conjs), score)
    return builder.table()
