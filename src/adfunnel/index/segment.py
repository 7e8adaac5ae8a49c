"""Columnar storage of compiled conjunctions: the building block of the conjunction index.

A :class:`Segment` is an immutable inverted index over conjunctions in the spirit of
Whang et al., "Indexing Boolean Expressions" (VLDB 2009), stored as numpy arrays
(no Python object per ad or per conjunction):

- Conjunctions are numbered best ad first: by the ad's static score descending,
  then ad id ascending (an ad's conjunctions are adjacent). ``conj_k`` holds each
  conjunction's size K (its number of ``∈`` terms); the paper's size partitions
  become a per-conjunction comparison (hits == K), which vectorises. K = 0
  conjunctions (``zero_ids``) are the paper's Z entry: candidates for every request.
- ``∈`` postings: per key (attribute, value) a sorted ``uint32`` array of
  ``conj_id << 5 | slot``, where ``slot`` (0..K-1) is the term's position in its
  conjunction. A conjunction matches when all K slots are hit by the request's keys.
- ``∉`` postings: per key a sorted ``uint32`` array of conjunction ids; any hit rejects.

All postings live in two flat arrays with per-key offsets (CSR).

Reading long lists only as far as needed: a query reads conjunction ids in windows
from the best down (``FIRST_WINDOW`` first, then sized from the match rate seen so
far) and stops as soon as more than ``limit`` distinct ads matched; every ad not
read then scores below every ad read. Per window: the request's posting slices
are gathered (a binary search per key), hits of keys of one attribute are
de-duplicated, each conjunction's hits are counted (a count array over the window
when hits are dense, sorting when sparse), a conjunction whose count equals its K
matches unless a ``∉`` posting of the request names it.
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
#: Bulk builds with at most this many distinct keys group postings by a 16-bit radix sort.
RADIX_MAX_KEYS = 1 << 16
#: Conjunction ids read in a query's first window; later windows follow the match rate.
FIRST_WINDOW = 1 << 14
#: A later window is at most this many times its predecessor.
WINDOW_GROWTH = 16

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
        return self

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
            self.dup_ids,
            self.zero_ids,
            self.in_off,
            self.in_enc,
            self.not_off,
            self.not_conj,
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

        Reads windows of conjunction ids, best ads first, and stops as soon as more
        than ``want`` distinct ads matched, so the result holds every ad among the
        best ``want`` matching ones, and more than ``want`` ads exactly when more
        matched. ``spans``: as from :meth:`key_ids_of`. Returns sorted, distinct
        int32 ranks (best first).
        """
        n_conj = self.n_conjunctions
        if not n_conj:
            return _EMPTY32
        in_enc, not_conj = self.in_enc, self.not_conj
        attr_of = [-1] * len(kids)
        for i, (a, b) in enumerate(spans):
            attr_of[a:b] = [i] * (b - a)
        ins = [
            (in_enc[a:b], attr)
            for a, b, attr in zip(
                self.in_off[kids].tolist(), self.in_off[kids + 1].tolist(), attr_of, strict=True
            )
            if b > a
        ]
        nots = [
            not_conj[a:b]
            for a, b in zip(
                self.not_off[kids].tolist(), self.not_off[kids + 1].tolist(), strict=True
            )
            if b > a
        ]
        in_pos = [0] * len(ins)
        not_pos = [0] * len(nots)
        found: list[np.ndarray] = []
        n_found, last = 0, -1
        w0, width = 0, FIRST_WINDOW
        while w0 < n_conj:
            w1 = min(n_conj, w0 + width)
            if n_conj - w1 < width // 2:
                w1 = n_conj
            e1 = np.uint32(w1 << SLOT_BITS)  # same dtype as the lists: no conversion copy
            n1 = np.uint32(w1)
            singles: list[np.ndarray] = []
            multis: list[list[np.ndarray]] = [[] for _ in spans]
            for i, (p, attr) in enumerate(ins):
                a = in_pos[i]
                b = in_pos[i] = a + int(p[a:].searchsorted(e1))
                if b > a:
                    if attr < 0:
                        singles.append(p[a:b])
                    else:
                        multis[attr].append(p[a:b])
            cand = self._window(w0, w1, singles, [m for m in multis if m])
            negs = []
            for i, p in enumerate(nots):
                a = not_pos[i]
                b = not_pos[i] = a + int(p[a:].searchsorted(n1))
                if b > a:
                    negs.append(p[a:b])
            if len(cand) and negs:
                cand = _reject(cand, np.concatenate(negs) if len(negs) > 1 else negs[0])
            rows = self.conj_ad[cand]
            ranks = self.ad_rank[rows[alive[rows]]]  # ascending: ids run in rank order
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

    def _window(
        self, w0: int, w1: int, singles: list[np.ndarray], multis: list[list[np.ndarray]]
    ) -> np.ndarray:
        """Conjunction ids in [w0, w1) whose K ``∈`` slots are all hit (K = 0 included)."""
        zero = self.zero_ids[self.zero_ids.searchsorted(w0) : self.zero_ids.searchsorted(w1)]
        m = sum(len(p) for p in singles) + sum(len(p) for ps in multis for p in ps)
        if m == 0:
            return zero
        width = w1 - w0
        dup = self.dup_ids.searchsorted(w1) > self.dup_ids.searchsorted(w0)
        if dup or m * SORT_PATH_RATIO < width:
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
            return np.sort(np.concatenate((zero, matched))) if len(zero) else matched
        # counting path: one slot per attribute here, so count distinct attributes hit
        if singles:
            flat = np.concatenate(singles) if len(singles) > 1 else singles[0]
            rel = flat >> SLOT_BITS
            rel -= np.uint32(w0)
            counts = np.bincount(rel, minlength=width)
        else:
            counts = np.zeros(width, dtype=np.int64)
        for ps in multis:
            hit = np.zeros(width, dtype=bool)
            for p in ps:
                rel = p >> SLOT_BITS
                rel -= np.uint32(w0)
                hit[rel] = True
            counts += hit
        return np.flatnonzero(counts == self.conj_k[w0:w1]) + w0


_EMPTY32 = np.zeros(0, dtype=np.int32)


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
