"""One segment's query as numpy expressions: the reference of the compiled matcher.

:func:`match_numpy` answers what :meth:`adfunnel.index.segment.Segment.match` answers,
with the same windows (:func:`adfunnel.index.matching.window_end`,
:func:`~adfunnel.index.matching.next_width`) and the same two paths per window (the
bitmap path and the sort path, :mod:`adfunnel.index.segment` documents both), each a
few numpy calls per posting list, bitmap row and window. Tuning constants are read
from :mod:`adfunnel.index.segment` at call time, so a test's settings hold.
"""

from __future__ import annotations

import threading

import numpy as np

from adfunnel.index import segment
from adfunnel.index.matching import next_width, window_end
from adfunnel.index.postings import SLOT_BITS, SLOT_MASK, bits_ids
from adfunnel.index.segment import Segment
from adfunnel.index.table import ranges

_EMPTY32 = np.zeros(0, dtype=np.int32)
_SCRATCH = threading.local()


def match_numpy(seg: Segment, kids: np.ndarray, alive: np.ndarray | None,
                want: int) -> np.ndarray:
    """:meth:`Segment.match` as numpy expressions, window by window: the reference the
    compiled matcher (:mod:`adfunnel.index.matching`) is tested against."""
    n_conj = seg.n_conjunctions
    if not n_conj:
        return _EMPTY32
    q = _Query(seg, kids)
    found: list[np.ndarray] = []
    n_found, last = 0, -1
    w0, width = 0, segment.FIRST_WINDOW
    widest = seg.widest_window()
    while w0 < n_conj:
        w1 = int(window_end(w0, width, widest, n_conj))
        cand = q.window(w0, w1)
        if alive is not None:
            cand = cand[alive[seg.conj_ad[cand]]]
        ranks = seg.conj_rank[cand]  # ascending: ids run in rank order
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
        width = int(next_width(n_found, w1, want, width, segment.FIRST_WINDOW,
                               segment.WINDOW_GROWTH))
        w0 = w1
    if not found:
        return _EMPTY32
    return np.concatenate(found) if len(found) > 1 else found[0]



_SCRATCH = threading.local()


def _scratch(n: int) -> np.ndarray:
    """A per-thread all-False bool buffer of at least ``n`` (callers clear what they set)."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or len(buf) < n:
        buf = _SCRATCH.buf = np.zeros(max(n, 1 << 16), dtype=bool)
    return buf



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
        rows = ranges(d0, seg.in_dense_off[kids + 1] - d0)
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
        self.not_rows = ranges(d0, seg.not_dense_off[kids + 1] - d0)

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
        m += (len(self.in_rows) + len(self.not_rows)) * (width // segment.DENSE_RATIO + 1)
        if m * segment.SORT_PATH_RATIO < width:
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
            c = bits_ids(seg.in_bits[r, b0:b1], hi)
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
            c = bits_ids(seg.not_bits[r, b0:b1], hi)
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

