"""Columnar storage of compiled conjunctions: the building block of the conjunction index.

A :class:`Segment` is an immutable inverted index over conjunctions in the layout of
Whang et al., "Indexing Boolean Expressions" (VLDB 2009), stored as numpy arrays
(no Python object per ad or per conjunction):

- Conjunctions are numbered by (score band, size K, static score descending, ad id
  ascending). Inside each band every K forms one contiguous id range (the paper's
  size partitions); the K = 0 range is the paper's Z entry: a conjunction with no
  ``∈`` term is a candidate for every request.
- ``∈`` postings: per key (attribute, value) a sorted ``uint32`` array of
  ``conj_id << 5 | slot``, where ``slot`` (0..K-1) is the term's position in its
  conjunction. A conjunction matches when all K slots are hit by the request's keys.
- ``∉`` postings: per key a sorted ``uint32`` array of conjunction ids; any hit rejects.

All postings live in two flat arrays with per-key offsets (CSR).

Score bands (reading long lists only as far as needed): band 0 holds the
``FIRST_WINDOW`` best conjunctions of the segment by static score, band 1 the next
``2 * FIRST_WINDOW``, and so on, doubling; a band is one contiguous id range, so it
is one contiguous slice of every posting list (``band_off[key, b]``). A query reads
band by band and stops after the first band that leaves more than ``limit``
distinct matching ads: every ad not read then scores below every ad read.

Matching one band (ids [B0, B1)): the request's posting slices are gathered; hits of
keys of one attribute are de-duplicated; each conjunction's hits are counted, with
a count array over the band when hits are dense or by sorting them when sparse;
a conjunction whose count equals its K matches (K = 0: count 0), unless a ``∉``
posting of the request names it.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adfunnel.targeting.dnf import MAX_IN_TERMS, Conjunction
from adfunnel.targeting.evaluate import RequestAttributes

#: Bits of a posting entry that carry the term slot (MAX_IN_TERMS = 2**SLOT_BITS).
SLOT_BITS = 5
assert MAX_IN_TERMS <= 1 << SLOT_BITS, "a term slot must fit in SLOT_BITS"
#: Most conjunctions one segment holds (conjunction ids use the other 27 bits).
MAX_SEGMENT_CONJUNCTIONS = 1 << (32 - SLOT_BITS)
#: Conjunctions in the best score band; each next band is twice as large.
FIRST_WINDOW = 1 << 14

#: A window whose hits are this many times sparser than its width is counted by
#: sorting the hits; a denser one with a count array over the window.
SORT_PATH_RATIO = 16

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


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts.astype(np.int64) - offsets, lengths) + np.arange(total, dtype=np.int64)


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
        conj_src = _ranges(tmpl_conj[ad_tmpl], n_conj)
        del n_conj
        tc_in = np.frombuffer(self._tc_in, dtype=np.int64)
        tc_not = np.frombuffer(self._tc_not, dtype=np.int64)
        in_len = tc_in[conj_src + 1] - tc_in[conj_src]
        in_src = _ranges(tc_in[conj_src], in_len)
        not_len = tc_not[conj_src + 1] - tc_not[conj_src]
        not_src = _ranges(tc_not[conj_src], not_len)
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


def _csr(keys: np.ndarray, values: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort (key, value) pairs; return per-key offsets int64[n_keys + 1] and values uint32."""
    pairs = (keys.astype(np.uint64) << np.uint64(32)) | values.astype(np.uint64)
    del keys
    pairs.sort()
    off = np.zeros(n_keys + 1, dtype=np.int64)
    np.cumsum(np.bincount((pairs >> np.uint64(32)).astype(np.int64), minlength=n_keys), out=off[1:])
    return off, (pairs & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _band_offsets(off: np.ndarray, values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per key, where each of ``bounds`` falls in the key's sorted slice of ``values``."""
    out = np.empty((len(off) - 1, len(bounds)), dtype=np.int64)
    probe = bounds.astype(values.dtype)
    for k in range(len(off) - 1):
        a, b = int(off[k]), int(off[k + 1])
        out[k] = a + np.searchsorted(values[a:b], probe)
    return out


class Segment:
    """An immutable conjunction index over a set of ads (see module docstring).

    Build with :meth:`build`; ``match`` answers one request. Liveness of ads is
    not stored here: callers pass an ``alive`` mask so a removal copies one bool
    per ad instead of rebuilding.
    """

    def __init__(self, table: ConjTable) -> None:
        n_conj = len(table.conj_ad)
        if n_conj >= MAX_SEGMENT_CONJUNCTIONS:
            raise ValueError(f"a segment holds fewer than {MAX_SEGMENT_CONJUNCTIONS} conjunctions")
        self.keys = table.keys
        self.key_ids: dict[Key, int] = {k: i for i, k in enumerate(table.keys)}
        self.ad_ids = table.ad_ids
        self.scores = table.scores
        n_keys = len(table.keys)
        # Score bands: cut b is the score of the (FIRST_WINDOW * 2**b)-th best conjunction.
        score = table.scores[table.conj_ad]
        desc = np.sort(score)[::-1]
        cuts: list[float] = []
        while FIRST_WINDOW * (1 << len(cuts)) < n_conj:
            cuts.append(float(desc[FIRST_WINDOW * (1 << len(cuts)) - 1]))
        del desc
        self.n_bands = len(cuts) + 1
        band = np.searchsorted(-np.array(cuts, dtype=np.float64), -score, side="left")
        del score
        # Ads ranked by (score descending, id ascending): ad_rank[row], rank_row[rank].
        self.rank_row = np.lexsort((table.ad_ids, -table.scores)).astype(np.int32)
        self.ad_rank = np.empty(len(table.ad_ids), dtype=np.int32)
        self.ad_rank[self.rank_row] = np.arange(len(table.ad_ids), dtype=np.int32)
        # conjunction order: (band, K, ad rank), packed in one int64 sort key
        sort_key = band.astype(np.int64) << 40
        sort_key |= table.conj_k.astype(np.int64) << 32
        sort_key |= self.ad_rank[table.conj_ad]
        order = np.argsort(sort_key)
        del sort_key
        band = band[order]
        rank = np.empty(n_conj, dtype=np.int64)
        rank[order] = np.arange(n_conj, dtype=np.int64)
        #: int32[c]: ad row of each conjunction.
        self.conj_ad = table.conj_ad[order].astype(np.int32)
        #: uint8[c]: K (number of ∈ terms) of each conjunction.
        self.conj_k = table.conj_k[order]
        dup = table.conj_dup[order]
        del order
        #: int64[bands + 1]: first conjunction id of each band.
        self.band_bounds = np.searchsorted(band, np.arange(self.n_bands + 1)).astype(np.int64)
        #: bool[bands]: the band holds a conjunction with two ∈ terms on one attribute.
        self.band_dup = np.zeros(self.n_bands, dtype=bool)
        self.band_dup[np.unique(band[dup])] = True
        del band, dup
        #: int64[bands, 2]: the K = 0 (Z entry) id range inside each band.
        self.band_z = np.empty((self.n_bands, 2), dtype=np.int64)
        for b in range(self.n_bands):
            b0, b1 = int(self.band_bounds[b]), int(self.band_bounds[b + 1])
            self.band_z[b] = (b0, b0 + int(np.searchsorted(self.conj_k[b0:b1], 1)))
        rank = rank.astype(np.uint32)
        enc = rank[table.in_conj]
        enc <<= np.uint32(SLOT_BITS)
        enc |= table.in_slot
        self.in_off, self.in_enc = _csr(table.in_key, enc, n_keys)
        del enc
        self.not_off, self.not_conj = _csr(table.not_key, rank[table.not_conj], n_keys)
        del rank
        #: int64[keys, bands + 1]: index in in_enc / not_conj where band b starts in a key's list.
        self.band_off = _band_offsets(self.in_off, self.in_enc, self.band_bounds << SLOT_BITS)
        self.not_band_off = _band_offsets(self.not_off, self.not_conj, self.band_bounds)

    @classmethod
    def build(cls, table: ConjTable) -> Segment:
        return cls(table)

    @classmethod
    def empty(cls) -> Segment:
        return cls(TableBuilder().table())

    @property
    def n_conjunctions(self) -> int:
        return len(self.conj_ad)

    def nbytes(self) -> int:
        """Bytes held in numpy arrays (the key dictionary is not counted)."""
        arrays = (
            self.ad_ids,
            self.scores,
            self.ad_rank,
            self.rank_row,
            self.conj_ad,
            self.conj_k,
            self.in_off,
            self.in_enc,
            self.not_off,
            self.not_conj,
            self.band_off,
            self.not_band_off,
            self.band_bounds,
        )
        return sum(a.nbytes for a in arrays)

    def to_table(self, alive: np.ndarray) -> ConjTable:
        """The live ads of this segment back as columns (for merging segments)."""
        keep_conj = alive[self.conj_ad]
        new_conj = np.cumsum(keep_conj) - 1
        new_ad = np.cumsum(alive) - 1
        in_key = np.repeat(np.arange(len(self.keys), dtype=np.int64), np.diff(self.in_off))
        in_conj = (self.in_enc >> SLOT_BITS).astype(np.int64)
        m = keep_conj[in_conj]
        not_key = np.repeat(np.arange(len(self.keys), dtype=np.int64), np.diff(self.not_off))
        not_conj = self.not_conj.astype(np.int64)
        mn = keep_conj[not_conj]
        dup = np.repeat(self.band_dup, np.diff(self.band_bounds))
        return ConjTable(
            keys=list(self.keys),
            ad_ids=self.ad_ids[alive],
            scores=self.scores[alive],
            conj_ad=new_ad[self.conj_ad[keep_conj]],
            conj_k=self.conj_k[keep_conj],
            conj_dup=dup[keep_conj],
            in_conj=new_conj[in_conj[m]],
            in_slot=(self.in_enc[m] & ((1 << SLOT_BITS) - 1)).astype(np.uint8),
            in_key=in_key[m],
            not_conj=new_conj[not_conj[mn]],
            not_key=not_key[mn],
        )

    def key_ids_of(self, request: RequestAttributes) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Key ids of ``request`` known to this segment, grouped by attribute.

        Returns the key ids (int64) and the ``(start, end)`` spans of attributes
        that contributed more than one key (their hits must be de-duplicated).
        """
        kids: list[int] = []
        spans: list[tuple[int, int]] = []
        get = self.key_ids.get
        for attr, values in request.items():
            n = len(kids)
            for v in values:
                kid = get((attr, v))
                if kid is not None:
                    kids.append(kid)
            if len(kids) - n > 1:
                spans.append((n, len(kids)))
        return np.array(kids, dtype=np.int64), spans

    def match(
        self, kids: np.ndarray, spans: list[tuple[int, int]], alive: np.ndarray, want: int
    ) -> np.ndarray:
        """Ranks (see ``ad_rank``) of live ads matched by the request keys ``kids``.

        Reads band by band (best scores first) and stops after the first band that
        leaves more than ``want`` distinct ads, so the result holds every ad among
        the best ``want`` matching ones, and more than ``want`` ads exactly when
        more matched. ``spans``: as from :meth:`key_ids_of`. Returns sorted,
        distinct int32 ranks (best first).
        """
        if not self.n_conjunctions:
            return _EMPTY32
        in_enc, not_conj = self.in_enc, self.not_conj
        offs = self.band_off[kids].tolist()  # per key: where each band starts in its list
        noffs = self.not_band_off[kids].tolist()
        attr_of = [-1] * len(kids)
        for i, (a, b) in enumerate(spans):
            attr_of[a:b] = [i] * (b - a)
        keys = list(zip(offs, attr_of, strict=True))
        bounds = self.band_bounds.tolist()
        found: list[np.ndarray] = []
        n_found = 0
        ranks = _EMPTY32
        for b in range(self.n_bands):
            b0, b1 = bounds[b], bounds[b + 1]
            singles: list[np.ndarray] = []
            multis: list[list[np.ndarray]] = [[] for _ in spans]
            for off, attr in keys:
                lo, hi = off[b], off[b + 1]
                if hi > lo:
                    if attr < 0:
                        singles.append(in_enc[lo:hi])
                    else:
                        multis[attr].append(in_enc[lo:hi])
            cand = self._band(b, b0, b1, singles, [m for m in multis if m])
            if len(cand):
                negs = [not_conj[o[b] : o[b + 1]] for o in noffs if o[b + 1] > o[b]]
                if negs:
                    cand = _reject(cand, np.concatenate(negs) if len(negs) > 1 else negs[0])
            rows = self.conj_ad[cand]
            rows = rows[alive[rows]]
            if len(rows):
                found.append(self.ad_rank[rows])
                n_found += len(rows)
            if n_found > want or b == self.n_bands - 1:
                ranks = np.sort(np.concatenate(found)) if found else _EMPTY32
                if len(ranks) > 1:
                    ranks = ranks[np.concatenate(([True], ranks[1:] != ranks[:-1]))]
                if len(ranks) > want:
                    break
                found, n_found = [ranks], len(ranks)
        return ranks

    def _band(
        self,
        b: int,
        b0: int,
        b1: int,
        singles: list[np.ndarray],
        multis: list[list[np.ndarray]],
    ) -> np.ndarray:
        """Conjunction ids in band ``b`` ([b0, b1)) whose K ``∈`` slots are all hit."""
        z0, z1 = int(self.band_z[b, 0]), int(self.band_z[b, 1])
        m = sum(len(p) for p in singles) + sum(len(p) for ps in multis for p in ps)
        if m == 0:
            return np.arange(z0, z1, dtype=np.int64)
        width = b1 - b0
        if self.band_dup[b] or m * SORT_PATH_RATIO < width:
            # sort path: exact for any conjunction (several slots on one attribute too)
            parts = singles + [p for ps in multis for p in ps]
            enc = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
            if multis and len(enc) > 1:
                enc = enc[np.concatenate(([True], enc[1:] != enc[:-1]))]
            conj = (enc >> SLOT_BITS).astype(np.int64)
            starts = np.flatnonzero(np.concatenate(([True], conj[1:] != conj[:-1])))
            uniq = conj[starts]
            hits = np.diff(np.append(starts, len(conj)))
            matched = uniq[hits == self.conj_k[uniq]]
            return np.concatenate((np.arange(z0, z1, dtype=np.int64), matched))
        # counting path: one slot per attribute in this band, so count distinct attributes
        if singles:
            flat = np.concatenate(singles) if len(singles) > 1 else singles[0]
            counts = np.bincount((flat >> SLOT_BITS).astype(np.int64) - b0, minlength=width)
        else:
            counts = np.zeros(width, dtype=np.int64)
        for ps in multis:
            hit = np.zeros(width, dtype=bool)
            for p in ps:
                hit[(p >> SLOT_BITS).astype(np.int64) - b0] = True
            counts += hit
        return np.flatnonzero(counts == self.conj_k[b0:b1]) + b0


_EMPTY = np.zeros(0, dtype=np.int64)
_EMPTY32 = np.zeros(0, dtype=np.int32)


def _reject(cand: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """``cand`` (sorted conjunction ids) less those in ``neg`` (∉ hits of the same band)."""
    lo, hi = int(cand[0]), int(cand[-1]) + 1
    if hi - lo > 64 * len(cand) and len(neg) > 64 * len(cand):
        neg = np.sort(neg)  # few candidates, long lists: look each candidate up
        pos = np.minimum(np.searchsorted(neg, cand), len(neg) - 1)
        return cand[neg[pos] != cand]
    mask = np.ones(hi - lo, dtype=bool)
    neg = neg[(neg >= lo) & (neg < hi)].astype(np.int64)
    mask[neg - lo] = False
    return cand[mask[cand - lo]]
