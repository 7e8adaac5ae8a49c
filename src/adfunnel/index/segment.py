"""Columnar storage of compiled conjunctions: the building block of the conjunction index.

A :class:`Segment` is an immutable inverted index over conjunctions in the spirit of
Whang et al., "Indexing Boolean Expressions" (VLDB 2009), stored as numpy arrays
(no Python object per ad or per conjunction):

- Conjunctions are numbered best ad first: by the ad's static score descending,
  then ad id ascending (an ad's conjunctions are adjacent). ``conj_k`` holds each
  conjunction's size K (its number of ``∈`` terms); each ``∈`` term has a *slot*
  0..K-1 (its position in the conjunction). K = 0 conjunctions (``zero_ids``) are
  the paper's Z entry: candidates for every request.
- ``∈`` postings, per (key, slot) group, key = (attribute, value): a *sparse* group
  is a run of ``uint32`` entries ``conj_id << 5 | slot`` in the key's sorted list
  (``in_off``/``in_enc``, CSR); a *dense* group, one holding at least 1/``DENSE_RATIO``
  of the conjunctions, is a row of ``in_bits``, a packed bitmap over conjunction ids
  (so never bigger than the list it replaces).
- ``∉`` postings, per key: a sorted ``uint32`` list of conjunction ids
  (``not_off``/``not_conj``), or a row of ``not_bits`` when dense; any hit rejects.
- ``has_bits`` row s: the conjunctions with K > s.

Matching is set algebra over one window of conjunction ids, 64 per machine word:
with ``hit[s]`` the conjunctions whose slot s is hit by some request key and
``neg`` those a request key rejects, the window's matches are
``~(OR_s (has[s] & ~hit[s]) | neg)``. This is exact for any conjunction (two
terms on one attribute included) and needs no count per conjunction: sparse
entries are scattered into a per-thread scratch bool buffer and packed, dense
rows are OR-ed in word by word. A window whose entries are very sparse
(``SORT_PATH_RATIO``) is matched instead by sorting its entries and counting
distinct slots hit per conjunction (hits == K).

Reading long lists only as far as needed: a query reads conjunction ids in windows
from the best down (``FIRST_WINDOW`` first, then sized from the match rate seen so
far) and stops as soon as more than ``limit`` distinct ads matched; every ad not
read then scores below every ad read.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adfunnel.index.matching import match_segment
from adfunnel.targeting.dnf import MAX_IN_TERMS, Conjunction
from adfunnel.targeting.evaluate import RequestAttributes

#: Bits of a posting entry that carry the term slot (MAX_IN_TERMS = 2**SLOT_BITS).
SLOT_BITS = 5
assert MAX_IN_TERMS <= 1 << SLOT_BITS, "a term slot must fit in SLOT_BITS"
#: Most conjunctions one segment holds (conjunction ids use the other 27 bits).
MAX_SEGMENT_CONJUNCTIONS = 1 << (32 - SLOT_BITS)
#: Bulk builds with at most this many distinct keys group postings by a 16-bit radix sort.
RADIX_MAX_KEYS = 1 << 16
#: Conjunction ids read in a query's first window; later windows follow the match rate.
FIRST_WINDOW = 1 << 14
#: A later window is at most this many times its predecessor.
WINDOW_GROWTH = 16

#: A window whose hits are this many times sparser than its width is matched by
#: sorting the hits (cost ~ hits); a denser one with bitmaps (cost ~ width).
SORT_PATH_RATIO = 256
#: A posting group holding at least 1/DENSE_RATIO of a segment's conjunctions is
#: stored as a packed bitmap (then no bigger than its uint32 list).
DENSE_RATIO = 32
#: About the most bytes of per-thread scratch one window uses ((largest K + 1) per
#: conjunction): wider windows are split.
MAX_SCRATCH = 1 << 24

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


def _postings_radix(
    conj_src: np.ndarray,
    tc_off: np.ndarray,
    entry_key: np.ndarray,
    entry_slot: np.ndarray | None,
    n_keys: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Posting lists when key ids fit in 16 bits: one stable radix sort by key.

    Entries are produced in conjunction order (so each key's list comes out
    sorted) and grouped by key with numpy's O(n) radix sort for 16-bit keys.
    ``conj_src[c]`` is the template conjunction of conjunction c; ``tc_off`` the
    CSR offsets of template entries. Returns offsets int64[n_keys + 1], values uint32.
    """
    lens = tc_off[conj_src + 1] - tc_off[conj_src]
    src = _ranges(tc_off[conj_src], lens)
    key = entry_key[src].astype(np.uint16)
    vals = np.repeat(np.arange(len(conj_src), dtype=np.uint32), lens)
    del lens
    if entry_slot is not None:
        vals <<= np.uint32(SLOT_BITS)
        vals |= entry_slot[src]
    del src
    off = np.zeros(n_keys + 1, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=n_keys), out=off[1:])
    order = np.argsort(key, kind="stable")
    del key
    return off, vals[order]


def _postings(
    entry_tc: np.ndarray,
    entry_key: np.ndarray,
    entry_slot: np.ndarray | None,
    inst: np.ndarray,
    inst_off: np.ndarray,
    n_keys: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Posting lists from template-level entries (template conjunction, key[, slot]).

    Returns per-key offsets int64[n_keys + 1] and the values (uint32): conjunction
    ids, shifted left by SLOT_BITS and or-ed with the slot when ``entry_slot`` is given.
    """
    order = np.argsort(entry_key, kind="stable")
    tc, key = entry_tc[order], entry_key[order]
    lens = inst_off[tc + 1] - inst_off[tc]
    vals = inst[_ranges(inst_off[tc], lens)]
    if entry_slot is not None:
        vals <<= np.uint32(SLOT_BITS)
        vals |= np.repeat(entry_slot[order], lens)
    ent_off = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=ent_off[1:])
    first = np.searchsorted(key, np.arange(n_keys + 1))
    off = ent_off[first]
    # a key's list is the concatenation of sorted runs (one per template entry): merge them
    for k in np.flatnonzero(np.diff(first) > 1).tolist():
        vals[off[k] : off[k + 1]].sort(kind="stable")
    return off, vals


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
        # Ads ranked by (score descending, id ascending): ad_rank[row], rank_row[rank].
        self.rank_row = np.lexsort((table.ad_ids, -table.scores)).astype(np.int32)
        self.ad_rank = np.empty(len(table.ad_ids), dtype=np.int32)
        self.ad_rank[self.rank_row] = np.arange(len(table.ad_ids), dtype=np.int32)
        # conjunction ids in ad rank order
        order = np.argsort(self.ad_rank[table.conj_ad], kind="stable")
        rank = np.empty(n_conj, dtype=np.uint32)
        rank[order] = np.arange(n_conj, dtype=np.uint32)
        #: int32[c]: ad row of each conjunction.
        self.conj_ad = table.conj_ad[order].astype(np.int32)
        #: uint8[c]: K (number of ∈ terms) of each conjunction.
        self.conj_k = table.conj_k[order]
        #: int64: ids of conjunctions with two ∈ terms on one attribute (sorted).
        self.dup_ids = np.flatnonzero(table.conj_dup[order])
        del order
        #: int64: ids of K = 0 conjunctions (the Z entry), sorted.
        self.zero_ids = np.flatnonzero(self.conj_k == 0)
        enc = rank[table.in_conj]
        enc <<= np.uint32(SLOT_BITS)
        enc |= table.in_slot
        self.in_off, self.in_enc = _csr(table.in_key, enc, n_keys)
        del enc
        self.not_off, self.not_conj = _csr(table.not_key, rank[table.not_conj], n_keys)
        self._densify()

    @classmethod
    def build(cls, table: ConjTable) -> Segment:
        return cls(table)

    @classmethod
    def from_builder(cls, tb: TableBuilder) -> Segment:
        """The bulk path: postings assembled per template, never per (ad, term value).

        Equivalent to ``Segment(tb.table())``, but a key's posting list is the
        merge of the (already sorted) instance lists of the template conjunctions
        that hold the key, so no table of every entry is built and no global sort
        runs. Time O(entries · log templates per key), memory ~12 B per entry.
        """
        self = cls.__new__(cls)
        self.keys = list(tb.keys)
        self.key_ids = dict(tb.key_ids)
        n_keys = len(self.keys)
        self.ad_ids = np.array(tb.ad_ids, dtype=np.int64)
        self.scores = np.array(tb.scores, dtype=np.float64)
        self.rank_row = np.lexsort((self.ad_ids, -self.scores)).astype(np.int32)
        self.ad_rank = np.empty(len(self.ad_ids), dtype=np.int32)
        self.ad_rank[self.rank_row] = np.arange(len(self.ad_ids), dtype=np.int32)
        tmpl_conj = np.frombuffer(tb._tmpl_conj, dtype=np.int64)
        t_by_rank = np.frombuffer(tb.ad_tmpl, dtype=np.int64)[self.rank_row]
        n_per_ad = tmpl_conj[t_by_rank + 1] - tmpl_conj[t_by_rank]
        conj_src = _ranges(tmpl_conj[t_by_rank], n_per_ad)  # conjunctions in rank order
        del t_by_rank
        if len(conj_src) >= MAX_SEGMENT_CONJUNCTIONS:
            raise ValueError(f"a segment holds fewer than {MAX_SEGMENT_CONJUNCTIONS} conjunctions")
        self.conj_ad = np.repeat(self.rank_row, n_per_ad)
        del n_per_ad
        tc_k = np.frombuffer(tb._tc_k, dtype=np.uint8)
        self.conj_k = tc_k[conj_src]
        self.dup_ids = np.flatnonzero(np.frombuffer(tb._tc_dup, dtype=np.uint8)[conj_src])
        self.zero_ids = np.flatnonzero(self.conj_k == 0)
        tc_in = np.frombuffer(tb._tc_in, dtype=np.int64)
        tc_not = np.frombuffer(tb._tc_not, dtype=np.int64)
        in_key = np.frombuffer(tb._in_key, dtype=np.int64)
        in_slot = np.frombuffer(tb._in_slot, dtype=np.uint8)
        not_key = np.frombuffer(tb._not_key, dtype=np.int64)
        if n_keys <= RADIX_MAX_KEYS:
            self.in_off, self.in_enc = _postings_radix(conj_src, tc_in, in_key, in_slot, n_keys)
            self.not_off, self.not_conj = _postings_radix(conj_src, tc_not, not_key, None, n_keys)
            self._densify()
            return self
        # instances of each template conjunction: ascending conjunction ids, grouped
        n_tc = len(tc_k)
        inst = np.argsort(conj_src, kind="stable").astype(np.uint32)
        inst_off = np.zeros(n_tc + 1, dtype=np.int64)
        np.cumsum(np.bincount(conj_src, minlength=n_tc), out=inst_off[1:])
        del conj_src
        self.in_off, self.in_enc = _postings(
            np.repeat(np.arange(n_tc, dtype=np.int64), np.diff(tc_in)),
            in_key,
            in_slot,
            inst,
            inst_off,
            n_keys,
        )
        self.not_off, self.not_conj = _postings(
            np.repeat(np.arange(n_tc, dtype=np.int64), np.diff(tc_not)),
            not_key,
            None,
            inst,
            inst_off,
            n_keys,
        )
        self._densify()
        return self

    @classmethod
    def empty(cls) -> Segment:
        return cls(TableBuilder().table())

    @property
    def n_conjunctions(self) -> int:
        return len(self.conj_ad)

    def _densify(self) -> None:
        """Move dense posting groups out of the sparse lists into packed bitmaps.

        A group is the ``∈`` entries of one (key, slot) or the ``∉`` list of one key;
        it becomes a bitmap row (bit c = conjunction c, little-endian within uint64
        words) when it holds at least ``n_conjunctions / DENSE_RATIO`` entries, so a
        row is never much bigger than the list it replaces. Also builds ``has_bits``:
        row s has bit c set when conjunction c has more than s ``∈`` terms.
        """
        n = self.n_conjunctions
        nw = (n + 63) >> 6
        n_keys = len(self.keys)
        #: int32[c]: rank of each conjunction's ad (ascending, as ids run in rank order).
        self.conj_rank = self.ad_rank[self.conj_ad]
        #: int64[a]: ad ids in rank order (best first).
        self.rank_ids = self.ad_ids[self.rank_row]
        self.n_slots = int(self.conj_k.max()) if n else 0
        #: uint64[n_slots, words]: bit c of row s set when K(c) > s.
        self.has_bits = np.empty((self.n_slots, nw), dtype=np.uint64)
        buf = np.zeros(nw * 64, dtype=bool)
        for s in range(self.n_slots):
            np.greater(self.conj_k, s, out=buf[:n])
            self.has_bits[s] = np.packbits(buf, bitorder="little").view(np.uint64)
        thresh = max(1, -(-n // DENSE_RATIO))
        # ∈ groups: (key, slot) pairs with at least `thresh` entries
        lens = np.diff(self.in_off)
        pairs: list[tuple[int, int]] = []
        for k in np.flatnonzero(lens >= thresh).tolist():
            a, b = int(self.in_off[k]), int(self.in_off[k + 1])
            cnt = np.bincount(self.in_enc[a:b] & np.uint32(SLOT_MASK), minlength=1 << SLOT_BITS)
            pairs.extend((k, s) for s in np.flatnonzero(cnt >= thresh).tolist())
        self.in_bits = np.empty((len(pairs), nw), dtype=np.uint64)
        self.in_dense_slot = np.array([s for _, s in pairs], dtype=np.int64)
        self.in_dense_off = np.searchsorted(
            np.array([k for k, _ in pairs], dtype=np.int64), np.arange(n_keys + 1)
        )
        if pairs:
            keep = np.ones(len(self.in_enc), dtype=bool)
            removed = np.zeros(n_keys, dtype=np.int64)
            for r, (k, s) in enumerate(pairs):
                a, b = int(self.in_off[k]), int(self.in_off[k + 1])
                m = (self.in_enc[a:b] & np.uint32(SLOT_MASK)) == s
                buf[:] = False
                buf[self.in_enc[a:b][m] >> np.uint32(SLOT_BITS)] = True
                self.in_bits[r] = np.packbits(buf, bitorder="little").view(np.uint64)
                keep[a:b] &= ~m
                removed[k] += int(m.sum())
            self.in_enc = self.in_enc[keep]
            self.in_off = self.in_off - np.concatenate(([0], np.cumsum(removed)))
        # ∉ keys with at least `thresh` conjunctions
        lens = np.diff(self.not_off)
        dense = np.flatnonzero(lens >= thresh)
        self.not_bits = np.empty((len(dense), nw), dtype=np.uint64)
        self.not_dense_off = np.searchsorted(dense, np.arange(n_keys + 1))
        if len(dense):
            keep = np.ones(len(self.not_conj), dtype=bool)
            removed = np.zeros(n_keys, dtype=np.int64)
            for r, k in enumerate(dense.tolist()):
                a, b = int(self.not_off[k]), int(self.not_off[k + 1])
                buf[:] = False
                buf[self.not_conj[a:b]] = True
                self.not_bits[r] = np.packbits(buf, bitorder="little").view(np.uint64)
                keep[a:b] = False
                removed[k] = b - a
            self.not_conj = self.not_conj[keep]
            self.not_off = self.not_off - np.concatenate(([0], np.cumsum(removed)))

    def nbytes(self) -> int:
        """Bytes held in numpy arrays (the key dictionary is not counted)."""
        arrays = (
            self.ad_ids,
            self.scores,
            self.ad_rank,
            self.rank_row,
            self.conj_ad,
            self.conj_k,
            self.dup_ids,
            self.zero_ids,
            self.in_off,
            self.in_enc,
            self.not_off,
            self.not_conj,
            self.has_bits,
            self.conj_rank,
            self.rank_ids,
            self.in_bits,
            self.in_dense_slot,
            self.in_dense_off,
            self.not_bits,
            self.not_dense_off,
        )
        return sum(a.nbytes for a in arrays)

    def _full_postings(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every ``∈`` entry (key, enc) and ``∉`` entry (key, conj), bitmaps expanded."""
        n = self.n_conjunctions
        n_keys = len(self.keys)
        in_key = [np.repeat(np.arange(n_keys, dtype=np.int64), np.diff(self.in_off))]
        in_enc = [self.in_enc]
        row_key = np.repeat(np.arange(n_keys, dtype=np.int64), np.diff(self.in_dense_off))
        for r in range(len(self.in_bits)):
            c = _bits_ids(self.in_bits[r], n)
            in_key.append(np.full(len(c), row_key[r], dtype=np.int64))
            in_enc.append((c << np.uint32(SLOT_BITS)) | np.uint32(self.in_dense_slot[r]))
        not_key = [np.repeat(np.arange(n_keys, dtype=np.int64), np.diff(self.not_off))]
        not_conj = [self.not_conj]
        row_key = np.repeat(np.arange(n_keys, dtype=np.int64), np.diff(self.not_dense_off))
        for r in range(len(self.not_bits)):
            c = _bits_ids(self.not_bits[r], n)
            not_key.append(np.full(len(c), row_key[r], dtype=np.int64))
            not_conj.append(c)
        return (
            np.concatenate(in_key),
            np.concatenate(in_enc),
            np.concatenate(not_key),
            np.concatenate(not_conj),
        )

    def to_table(self, alive: np.ndarray) -> ConjTable:
        """The live ads of this segment back as columns (for merging segments)."""
        keep_conj = alive[self.conj_ad]
        new_conj = np.cumsum(keep_conj) - 1
        new_ad = np.cumsum(alive) - 1
        in_key, in_enc, not_key, not_conj_u = self._full_postings()
        in_conj = (in_enc >> SLOT_BITS).astype(np.int64)
        m = keep_conj[in_conj]
        not_conj = not_conj_u.astype(np.int64)
        mn = keep_conj[not_conj]
        dup = np.zeros(self.n_conjunctions, dtype=bool)
        dup[self.dup_ids] = True
        return ConjTable(
            keys=list(self.keys),
            ad_ids=self.ad_ids[alive],
            scores=self.scores[alive],
            conj_ad=new_ad[self.conj_ad[keep_conj]],
            conj_k=self.conj_k[keep_conj],
            conj_dup=dup[keep_conj],
            in_conj=new_conj[in_conj[m]],
            in_slot=(in_enc[m] & SLOT_MASK).astype(np.uint8),
            in_key=in_key[m],
            not_conj=new_conj[not_conj[mn]],
            not_key=not_key[mn],
        )

    def key_ids_of(self, request: RequestAttributes) -> np.ndarray:
        """Key ids (int64) of the request's (attribute, value) pairs known to this segment."""
        get = self.key_ids.get
        kids = [
            k
            for attr, values in request.items()
            for v in values
            if (k := get((attr, v))) is not None
        ]
        return np.array(kids, dtype=np.int64)

    def match(self, kids: np.ndarray, alive: np.ndarray | None, want: int) -> np.ndarray:
        """Ranks (see ``ad_rank``) of live ads matched by the request keys ``kids``.

        Reads windows of conjunction ids, best ads first, and stops as soon as more
        than ``want`` distinct ads matched, so the result holds every ad among the
        best ``want`` matching ones, and more than ``want`` ads exactly when more
        matched. ``alive``: bool per ad row, or None when every ad is live.
        Returns sorted, distinct int32 ranks (best first).
        """
        if not self.n_conjunctions:
            return _EMPTY32
        return match_segment(
            kids, self.in_off, self.in_enc, self.not_off, self.not_conj, self.in_dense_off,
            self.in_dense_slot, self.in_bits, self.not_dense_off, self.not_bits, self.has_bits,
            self.zero_ids, self.conj_k, self.conj_rank, self.conj_ad,
            _NO_ALIVE if alive is None else alive, alive is not None, want, FIRST_WINDOW,
            WINDOW_GROWTH, max(64, (MAX_SCRATCH // (self.n_slots + 1)) & ~63), SORT_PATH_RATIO,
            DENSE_RATIO)

    def match_numpy(self, kids: np.ndarray, alive: np.ndarray | None, want: int) -> np.ndarray:
        """:meth:`match` as numpy expressions, window by window: the reference the
        compiled matcher (:mod:`adfunnel.index.matching`) is tested against."""
        n_conj = self.n_conjunctions
        if not n_conj:
            return _EMPTY32
        q = _Query(self, kids)
        found: list[np.ndarray] = []
        n_found, last = 0, -1
        w0, width = 0, FIRST_WINDOW
        widest = max(64, (MAX_SCRATCH // (self.n_slots + 1)) & ~63)
        while w0 < n_conj:
            w1 = min(n_conj, w0 + min(width, widest))
            if w1 - w0 >= 64:
                w1 = min(n_conj, (w1 + 63) & ~63)
            if n_conj - w1 < min(width, widest) // 2:
                w1 = n_conj
            cand = q.window(w0, w1)
            if alive is not None:
                cand = cand[alive[self.conj_ad[cand]]]
            ranks = self.conj_rank[cand]  # ascending: ids run in rank order
            if len(ranks):
                keep = np.empty(len(ranks), dtype=bool)
                keep[0] = ranks[0] != last
                np.not_equal(ranks[1:], ranks[:-1], out=keep[1:])
                ranks = ranks[keep]
                if len(ranks):
                    found.append(ranks)
                    n_found += len(ranks)
                    last = int(ranks[-1])
            if n_found > want:
                break
            # next window: enough for the missing ads at the rate seen so far
            rate = n_found / w1
            need = (want + 1 - n_found) / rate * 1.1 if rate > 0 else float("inf")
            width = int(max(FIRST_WINDOW, min(need, width * WINDOW_GROWTH)))
            w0 = w1
        if not found:
            return _EMPTY32
        return np.concatenate(found) if len(found) > 1 else found[0]


_EMPTY32 = np.zeros(0, dtype=np.int32)
_NO_ALIVE = np.zeros(0, dtype=bool)
SLOT_MASK = (1 << SLOT_BITS) - 1
_SCRATCH = threading.local()


def _scratch(n: int) -> np.ndarray:
    """A per-thread all-False bool buffer of at least ``n`` (callers clear what they set)."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or len(buf) < n:
        buf = _SCRATCH.buf = np.zeros(max(n, 1 << 16), dtype=bool)
    return buf


def _bits_ids(words: np.ndarray, limit: int) -> np.ndarray:
    """Set bit positions (uint32, ascending) of packed ``words``, below ``limit``."""
    bits = np.unpackbits(words.view(np.uint8), bitorder="little").view(bool)[:limit]
    return np.flatnonzero(bits).astype(np.uint32)


class _Query:
    """One request's posting lists in one segment, read window by window."""

    __slots__ = (
        "in_pos",
        "in_rows",
        "in_slots",
        "in_starts",
        "ins",
        "not_pos",
        "not_rows",
        "nots",
        "seg",
    )

    def __init__(self, seg: Segment, kids: np.ndarray) -> None:
        self.seg = seg
        in_enc, not_conj = seg.in_enc, seg.not_conj
        self.ins = [
            in_enc[a:b]
            for a, b in zip(seg.in_off[kids].tolist(), seg.in_off[kids + 1].tolist(), strict=True)
            if b > a
        ]
        self.nots = [
            not_conj[a:b]
            for a, b in zip(seg.not_off[kids].tolist(), seg.not_off[kids + 1].tolist(), strict=True)
            if b > a
        ]
        self.in_pos = [0] * len(self.ins)
        self.not_pos = [0] * len(self.nots)
        d0 = seg.in_dense_off[kids]
        rows = _ranges(d0, seg.in_dense_off[kids + 1] - d0)
        slots = seg.in_dense_slot[rows]
        order = np.argsort(slots, kind="stable")
        self.in_rows, slots = rows[order], slots[order]
        starts = (
            np.flatnonzero(np.concatenate(([True], slots[1:] != slots[:-1])))
            if len(slots)
            else np.zeros(0, dtype=np.int64)
        )
        self.in_starts = starts
        self.in_slots = slots[starts]
        d0 = seg.not_dense_off[kids]
        self.not_rows = _ranges(d0, seg.not_dense_off[kids + 1] - d0)

    def _sparse(self, w1: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The sparse ``∈`` and ``∉`` entries below conjunction ``w1`` not read yet."""
        e1 = np.uint32(w1 << SLOT_BITS)  # same dtype as the lists: no conversion copy
        n1 = np.uint32(w1)
        ins, nots = [], []
        for i, p in enumerate(self.ins):
            a = self.in_pos[i]
            b = self.in_pos[i] = a + int(p[a:].searchsorted(e1))
            if b > a:
                ins.append(p[a:b])
        for i, p in enumerate(self.nots):
            a = self.not_pos[i]
            b = self.not_pos[i] = a + int(p[a:].searchsorted(n1))
            if b > a:
                nots.append(p[a:b])
        return ins, nots

    def window(self, w0: int, w1: int) -> np.ndarray:
        """Conjunction ids in [w0, w1) the request matches, ascending."""
        ins, nots = self._sparse(w1)
        seg = self.seg
        b0, b1 = w0 >> 6, (w1 + 63) >> 6
        width = w1 - w0
        m = sum(len(p) for p in ins) + sum(len(p) for p in nots)
        m += (len(self.in_rows) + len(self.not_rows)) * (width // DENSE_RATIO + 1)
        if m * SORT_PATH_RATIO < width:
            return self._sorted(w0, w1, ins, nots)
        base, nw = b0 << 6, b1 - b0
        nbits = nw << 6
        S = seg.n_slots
        if ins or nots:
            buf = _scratch((S + 1) * nbits)
            idx_parts = []
            if ins:
                enc = np.concatenate(ins) if len(ins) > 1 else ins[0]
                idx = (enc & np.uint32(SLOT_MASK)).astype(np.int64)
                idx *= nbits
                idx += enc >> np.uint32(SLOT_BITS)
                idx -= base
                idx_parts.append(idx)
            if nots:
                neg = np.concatenate(nots) if len(nots) > 1 else nots[0]
                idx_parts.append(neg.astype(np.int64) + (S * nbits - base))
            for idx in idx_parts:
                buf[idx] = True
            hit = np.packbits(buf[: (S + 1) * nbits], bitorder="little").view(np.uint64)
            for idx in idx_parts:
                buf[idx] = False
            hit = hit.reshape(S + 1, nw)
        else:
            hit = np.zeros((S + 1, nw), dtype=np.uint64)
        if len(self.in_rows):
            dense = seg.in_bits[self.in_rows, b0:b1]
            if len(self.in_starts) < len(self.in_rows):
                dense = np.bitwise_or.reduceat(dense, self.in_starts, axis=0)
            hit[self.in_slots] |= dense
        if len(self.not_rows):
            hit[S] |= np.bitwise_or.reduce(seg.not_bits[self.not_rows, b0:b1], axis=0)
        has = seg.has_bits[:, b0:b1]
        np.bitwise_not(hit[:S], out=hit[:S])
        np.bitwise_and(hit[:S], has, out=hit[:S])
        fail = np.bitwise_or.reduce(hit, axis=0)  # a slot missed, or a ∉ hit
        np.bitwise_not(fail, out=fail)
        words = np.flatnonzero(fail)
        if len(words) * 4 < nw:  # few words match: unpack only those
            bits = np.unpackbits(fail[words].view(np.uint8), bitorder="little").view(bool)
            pos = np.flatnonzero(bits)
            cand = words[pos >> 6] << 6
            cand += pos & 63
            cand = cand[(cand >= w0 - base) & (cand < w1 - base)]
        else:
            bits = np.unpackbits(fail.view(np.uint8), bitorder="little").view(bool)
            cand = np.flatnonzero(bits[w0 - base : w1 - base])
            cand += w0 - base
        cand += base
        return cand

    def _sorted(
        self, w0: int, w1: int, ins: list[np.ndarray], nots: list[np.ndarray]
    ) -> np.ndarray:
        """:meth:`window` for few hits: sort the entries, count each conjunction's slots hit."""
        seg = self.seg
        b0, b1 = w0 >> 6, (w1 + 63) >> 6
        lo, hi = w0 - (b0 << 6), w1 - (b0 << 6)
        zero = seg.zero_ids[seg.zero_ids.searchsorted(w0) : seg.zero_ids.searchsorted(w1)]
        parts = list(ins)
        for r, s in zip(
            self.in_rows.tolist(), seg.in_dense_slot[self.in_rows].tolist(), strict=True
        ):
            c = _bits_ids(seg.in_bits[r, b0:b1], hi)
            c = c[c.searchsorted(lo) :] + np.uint32(b0 << 6)
            if len(c):
                parts.append((c << np.uint32(SLOT_BITS)) | np.uint32(s))
        if parts:
            enc = np.unique(np.concatenate(parts)) if len(parts) > 1 else parts[0]
            conj = (enc >> SLOT_BITS).astype(np.int64)
            starts = np.flatnonzero(np.concatenate(([True], conj[1:] != conj[:-1])))
            uniq = conj[starts]
            hits = np.diff(np.append(starts, len(conj)))
            cand = uniq[hits == seg.conj_k[uniq]]
            if len(zero):
                cand = np.sort(np.concatenate((zero, cand)))
        else:
            cand = zero
        if not len(cand):
            return cand
        negs = list(nots)
        for r in self.not_rows.tolist():
            c = _bits_ids(seg.not_bits[r, b0:b1], hi)
            negs.append(c[c.searchsorted(lo) :] + np.uint32(b0 << 6))
        negs = [p for p in negs if len(p)]
        if negs:
            cand = _reject(cand, np.concatenate(negs) if len(negs) > 1 else negs[0])
        return cand


def _reject(cand: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """``cand`` (sorted conjunction ids) less those in ``neg`` (∉ hits of the same window)."""
    lo, hi = int(cand[0]), int(cand[-1]) + 1
    if hi - lo > 64 * len(cand) and len(neg) > 64 * len(cand):
        neg = np.sort(neg)  # few candidates, long lists: look each candidate up
        pos = np.minimum(np.searchsorted(neg, cand), len(neg) - 1)
        return cand[neg[pos] != cand]
    mask = np.ones(hi - lo, dtype=bool)
    neg = neg[(neg >= lo) & (neg < hi)].astype(np.int64)
    mask[neg - lo] = False
    return cand[mask[cand - lo]]
