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

The segment's parts live apart: the table it is built from (:mod:`adfunnel.index.table`),
the posting lists' encoding and construction (:mod:`adfunnel.index.postings`), the
compiled query and its window schedule (:mod:`adfunnel.index.matching`), and the numpy
query it is tested against (:mod:`adfunnel.index.numpy_query`).
"""

from __future__ import annotations

import numpy as np

from adfunnel.index.matching import match_segment
from adfunnel.index.postings import (
    MAX_SEGMENT_CONJUNCTIONS,
    SLOT_BITS,
    SLOT_MASK,
    bits_ids,
    csr,
    postings,
    postings_radix,
)
from adfunnel.index.table import ConjTable, Key, TableBuilder, ranges
from adfunnel.targeting.evaluate import RequestAttributes

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

_EMPTY32 = np.zeros(0, dtype=np.int32)
_NO_ALIVE = np.zeros(0, dtype=bool)


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
        self.in_off, self.in_enc = csr(table.in_key, enc, n_keys)
        del enc
        self.not_off, self.not_conj = csr(table.not_key, rank[table.not_conj], n_keys)
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
        conj_src = ranges(tmpl_conj[t_by_rank], n_per_ad)  # conjunctions in rank order
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
            self.in_off, self.in_enc = postings_radix(conj_src, tc_in, in_key, in_slot, n_keys)
            self.not_off, self.not_conj = postings_radix(conj_src, tc_not, not_key, None, n_keys)
            self._densify()
            return self
        # instances of each template conjunction: ascending conjunction ids, grouped
        n_tc = len(tc_k)
        inst = np.argsort(conj_src, kind="stable").astype(np.uint32)
        inst_off = np.zeros(n_tc + 1, dtype=np.int64)
        np.cumsum(np.bincount(conj_src, minlength=n_tc), out=inst_off[1:])
        del conj_src
        self.in_off, self.in_enc = postings(
            np.repeat(np.arange(n_tc, dtype=np.int64), np.diff(tc_in)),
            in_key,
            in_slot,
            inst,
            inst_off,
            n_keys,
        )
        self.not_off, self.not_conj = postings(
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

    def _fullpostings(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every ``∈`` entry (key, enc) and ``∉`` entry (key, conj), bitmaps expanded."""
        n = self.n_conjunctions
        n_keys = len(self.keys)
        in_key = [np.repeat(np.arange(n_keys, dtype=np.int64), np.diff(self.in_off))]
        in_enc = [self.in_enc]
        row_key = np.repeat(np.arange(n_keys, dtype=np.int64), np.diff(self.in_dense_off))
        for r in range(len(self.in_bits)):
            c = bits_ids(self.in_bits[r], n)
            in_key.append(np.full(len(c), row_key[r], dtype=np.int64))
            in_enc.append((c << np.uint32(SLOT_BITS)) | np.uint32(self.in_dense_slot[r]))
        not_key = [np.repeat(np.arange(n_keys, dtype=np.int64), np.diff(self.not_off))]
        not_conj = [self.not_conj]
        row_key = np.repeat(np.arange(n_keys, dtype=np.int64), np.diff(self.not_dense_off))
        for r in range(len(self.not_bits)):
            c = bits_ids(self.not_bits[r], n)
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
        in_key, in_enc, not_key, not_conj_u = self._fullpostings()
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
            WINDOW_GROWTH, self.widest_window(), SORT_PATH_RATIO, DENSE_RATIO)

    def widest_window(self) -> int:
        """The most conjunction ids one window spans: its per-thread scratch ((largest
        K + 1) bytes per id) stays within about ``MAX_SCRATCH``; a multiple of 64."""
        return max(64, (MAX_SCRATCH // (self.n_slots + 1)) & ~63)
