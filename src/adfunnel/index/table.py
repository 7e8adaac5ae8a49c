"""Compiled ads as columns: the table a segment is built from, and its builder.

A :class:`ConjTable` holds every ad's conjunctions and their ``∈``/``∉`` entries as
numpy columns (no Python object per ad); :class:`TableBuilder` accumulates compiled
ads, storing each distinct conjunction list once as a template;
:func:`concat_tables` joins two tables (a segment merge). The segment
(:mod:`adfunnel.index.segment`) turns a table into posting lists.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adfunnel.targeting.dnf import Conjunction

Key = tuple[str, str]


@dataclass(slots=True)
class ConjTable:
    """Compiled ads as columns, the input of :meth:`Segment.build`.

    Shapes: ``a`` ads, ``c`` conjunctions, ``e`` ∈-entries (one per term value),
    ``f`` ∉-entries. ``keys[i]`` is the (attribute, value) of key id ``i``.
    """

    keys: list[Key]
    ad_ids: np.ndarray  # int64[a]
    scores: np.ndarray  # float64[a], expected value per impression
    conj_ad: np.ndarray  # int64[c], row into ad_ids
    conj_k: np.ndarray  # uint8[c], number of ∈ terms
    conj_dup: np.ndarray  # bool[c], two ∈ terms on one attribute
    in_conj: np.ndarray  # int32/int64[e]
    in_slot: np.ndarray  # uint8[e]
    in_key: np.ndarray  # int32/int64[e]
    not_conj: np.ndarray  # int32/int64[f]
    not_key: np.ndarray  # int32/int64[f]



def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), vectorised (one cumsum)."""
    keep = lengths > 0
    starts, lengths = starts[keep].astype(np.int64), lengths[keep].astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    steps = np.ones(total, dtype=np.int64)
    steps[0] = starts[0]
    run_starts = np.cumsum(lengths)[:-1]
    steps[run_starts] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(steps, out=steps)



class TableBuilder:
    """Accumulates compiled ads, sharing work between ads with identical targeting.

    Each distinct conjunction list becomes a *template* stored once in flat Python
    ``array`` columns; an ad costs one template id, its id and its score. ``table()``
    expands templates to per-ad columns with numpy.
    """

    def __init__(self) -> None:
        self.key_ids: dict[Key, int] = {}
        self.keys: list[Key] = []
        self._tmpl: dict[tuple[Conjunction, ...], int] = {}
        self._term_keys: dict[tuple[str, frozenset[str]], list[int]] = {}
        self._tmpl_conj = array("q", [0])  # template -> first template-conjunction (CSR)
        self._tc_k = array("B")
        self._tc_dup = array("B")
        self._tc_in = array("q", [0])  # template-conjunction -> first ∈ entry (CSR)
        self._in_key = array("q")
        self._in_slot = array("B")
        self._tc_not = array("q", [0])
        self._not_key = array("q")
        self.ad_ids = array("q")
        self.scores = array("d")
        self.ad_tmpl = array("q")

    def _key(self, attr: str, value: str) -> int:
        k = (attr, value)
        kid = self.key_ids.get(k)
        if kid is None:
            kid = self.key_ids[k] = len(self.keys)
            self.keys.append(k)
        return kid

    def template(self, conjs: Sequence[Conjunction]) -> int:
        """The template id of a conjunction list (created on first sight)."""
        sig = tuple(conjs)
        t = self._tmpl.get(sig)
        if t is not None:
            return t
        for c in sig:
            slot = 0
            for term in c.terms:
                tk = (term.attr, term.values)
                keys = self._term_keys.get(tk)
                if keys is None:
                    keys = self._term_keys[tk] = [self._key(term.attr, v) for v in term.values]
                if term.negated:
                    self._not_key.extend(keys)
                else:
                    self._in_key.extend(keys)
                    self._in_slot.extend([slot] * len(keys))
                    slot += 1
            self._tc_k.append(slot)
            self._tc_dup.append(len({t.attr for t in c.in_terms}) < slot)
            self._tc_in.append(len(self._in_key))
            self._tc_not.append(len(self._not_key))
        self._tmpl_conj.append(len(self._tc_k))
        t = self._tmpl[sig] = len(self._tmpl_conj) - 2
        return t

    def add(self, ad_id: int, template: int, score: float) -> None:
        self.ad_ids.append(ad_id)
        self.scores.append(score)
        self.ad_tmpl.append(template)

    def table(self) -> ConjTable:
        """Expand every added ad to its conjunction and entry columns."""
        ad_tmpl = np.frombuffer(self.ad_tmpl, dtype=np.int64)
        tmpl_conj = np.frombuffer(self._tmpl_conj, dtype=np.int64)
        n_conj = tmpl_conj[ad_tmpl + 1] - tmpl_conj[ad_tmpl]
        conj_ad = np.repeat(np.arange(len(ad_tmpl), dtype=np.int64), n_conj)
        conj_src = ranges(tmpl_conj[ad_tmpl], n_conj)
        del n_conj
        tc_in = np.frombuffer(self._tc_in, dtype=np.int64)
        tc_not = np.frombuffer(self._tc_not, dtype=np.int64)
        in_len = tc_in[conj_src + 1] - tc_in[conj_src]
        in_src = ranges(tc_in[conj_src], in_len)
        not_len = tc_not[conj_src + 1] - tc_not[conj_src]
        not_src = ranges(tc_not[conj_src], not_len)
        conj_ids = np.arange(len(conj_src), dtype=np.int32)
        return ConjTable(
            keys=list(self.keys),
            ad_ids=np.array(self.ad_ids, dtype=np.int64),
            scores=np.array(self.scores, dtype=np.float64),
            conj_ad=conj_ad,
            conj_k=np.frombuffer(self._tc_k, dtype=np.uint8)[conj_src],
            conj_dup=np.frombuffer(self._tc_dup, dtype=np.uint8)[conj_src].astype(bool),
            in_conj=np.repeat(conj_ids, in_len),
            in_slot=np.frombuffer(self._in_slot, dtype=np.uint8)[in_src],
            in_key=np.frombuffer(self._in_key, dtype=np.int64)[in_src].astype(np.int32),
            not_conj=np.repeat(conj_ids, not_len),
            not_key=np.frombuffer(self._not_key, dtype=np.int64)[not_src].astype(np.int32),
        )



def concat_tables(a: ConjTable, b: ConjTable) -> ConjTable:
    """One table holding the ads of ``a`` then those of ``b`` (keys unified)."""
    key_ids = {k: i for i, k in enumerate(a.keys)}
    keys = list(a.keys)
    remap = np.empty(len(b.keys), dtype=np.int64)
    for i, k in enumerate(b.keys):
        kid = key_ids.get(k)
        if kid is None:
            kid = key_ids[k] = len(keys)
            keys.append(k)
        remap[i] = kid
    na, nc = len(a.ad_ids), len(a.conj_ad)
    return ConjTable(
        keys=keys,
        ad_ids=np.concatenate([a.ad_ids, b.ad_ids]),
        scores=np.concatenate([a.scores, b.scores]),
        conj_ad=np.concatenate([a.conj_ad, b.conj_ad + na]),
        conj_k=np.concatenate([a.conj_k, b.conj_k]),
        conj_dup=np.concatenate([a.conj_dup, b.conj_dup]),
        in_conj=np.concatenate([a.in_conj, b.in_conj + nc]),
        in_slot=np.concatenate([a.in_slot, b.in_slot]),
        in_key=np.concatenate([a.in_key, remap[b.in_key]]),
        not_conj=np.concatenate([a.not_conj, b.not_conj + nc]),
        not_key=np.concatenate([a.not_key, remap[b.not_key]]),
    )

