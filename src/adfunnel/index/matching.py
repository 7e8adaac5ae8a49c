"""One segment's query as one compiled loop (numba): the windows of
:meth:`adfunnel.index.segment.Segment.match`, without a numpy call per posting list,
bitmap row and window; and the window schedule (:func:`window_end`, :func:`next_width`)
that it and the numpy reference (:mod:`adfunnel.index.numpy_query`) share.

The algorithm is the one :mod:`adfunnel.index.segment` documents: conjunction ids are
read in windows, best first; a window's matches are ``~(OR_s (has[s] & ~hit[s]) |
neg)`` over 64-bit words (the bitmap path), or — when its entries are very sparse —
the conjunctions whose distinct hit slots number K, less those a ``∉`` key rejects
(the sort path); reading stops once more than ``want`` distinct ads matched. Every
tuning constant is an argument, so the segment's (and the tests') settings hold.
Pure: arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros  # LLVM's cttz intrinsic

_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_SLOT_BITS = 5
_SLOT_MASK = 31


@njit(cache=True, nogil=True)
def match_segment(kids: np.ndarray, in_off: np.ndarray, in_enc: np.ndarray,
                  not_off: np.ndarray, not_conj: np.ndarray, in_dense_off: np.ndarray,
                  in_dense_slot: np.ndarray, in_bits: np.ndarray, not_dense_off: np.ndarray,
                  not_bits: np.ndarray, has_bits: np.ndarray, zero_ids: np.ndarray,
                  conj_k: np.ndarray, conj_rank: np.ndarray, conj_ad: np.ndarray,
                  alive: np.ndarray, use_alive: bool, want: int, first_window: int,
                  window_growth: int, widest: int, sort_ratio: int, dense_ratio: int,
                  ) -> np.ndarray:
    """Ranks (int32, ascending, distinct) of the live ads the request keys ``kids``
    match, holding every ad among the best ``want`` and more than ``want`` exactly when
    more matched (:meth:`~adfunnel.index.segment.Segment.match`)."""
    n_conj = len(conj_ad)
    n_slots = has_bits.shape[0]
    # the request's posting lists: sparse ∈ and ∉ lists (with a read cursor each) and
    # dense bitmap rows
    nk = len(kids)
    ins_cur = np.empty(nk, np.int64)
    ins_end = np.empty(nk, np.int64)
    nots_cur = np.empty(nk, np.int64)
    nots_end = np.empty(nk, np.int64)
    n_ins = 0
    n_nots = 0
    n_drows = 0
    n_nrows = 0
    for k in kids:
        if in_off[k + 1] > in_off[k]:
            ins_cur[n_ins] = in_off[k]
            ins_end[n_ins] = in_off[k + 1]
            n_ins += 1
        if not_off[k + 1] > not_off[k]:
            nots_cur[n_nots] = not_off[k]
            nots_end[n_nots] = not_off[k + 1]
            n_nots += 1
        n_drows += in_dense_off[k + 1] - in_dense_off[k]
        n_nrows += not_dense_off[k + 1] - not_dense_off[k]
    ins_cur, ins_end = ins_cur[:n_ins], ins_end[:n_ins]
    nots_cur, nots_end = nots_cur[:n_nots], nots_end[:n_nots]
    drows = np.empty(n_drows, np.int64)
    dslots = np.empty(n_drows, np.int64)
    nrows = np.empty(n_nrows, np.int64)
    i = 0
    j = 0
    for k in kids:
        for r in range(in_dense_off[k], in_dense_off[k + 1]):
            drows[i] = r
            dslots[i] = in_dense_slot[r]
            i += 1
        for r in range(not_dense_off[k], not_dense_off[k + 1]):
            nrows[j] = r
            j += 1
    ins_stop = np.empty(n_ins, np.int64)
    nots_stop = np.empty(n_nots, np.int64)
    out = np.empty(max(16, min(n_conj, 2 * want + 16)), np.int32)
    found = 0
    last = -1
    w0 = 0
    width = first_window
    while w0 < n_conj:
        w1 = window_end(w0, width, widest, n_conj)
        # the sparse entries below w1 not read yet
        m = 0
        e1 = np.uint32(w1 << _SLOT_BITS)
        for q in range(n_ins):
            a = ins_cur[q]
            b = a + np.searchsorted(in_enc[a:ins_end[q]], e1)
            ins_stop[q] = b
            m += b - a
        n1 = np.uint32(w1)
        for q in range(n_nots):
            a = nots_cur[q]
            b = a + np.searchsorted(not_conj[a:nots_end[q]], n1)
            nots_stop[q] = b
            m += b - a
        m += (n_drows + n_nrows) * ((w1 - w0) // dense_ratio + 1)
        if m * sort_ratio < w1 - w0:
            cand = _sorted_window(w0, w1, in_enc, ins_cur, ins_stop, not_conj, nots_cur,
                                  nots_stop, in_bits, drows, dslots, not_bits, nrows,
                                  zero_ids, conj_k)
        else:
            cand = _bitmap_window(w0, w1, n_slots, in_enc, ins_cur, ins_stop, not_conj,
                                  nots_cur, nots_stop, in_bits, drows, dslots, not_bits,
                                  nrows, has_bits)
        for q in range(n_ins):
            ins_cur[q] = ins_stop[q]
        for q in range(n_nots):
            nots_cur[q] = nots_stop[q]
        if found + len(cand) > len(out):  # grown before the loop: a swap inside it is slow
            grown = np.empty(max(2 * len(out), found + len(cand)), np.int32)
            grown[:found] = out[:found]
            out = grown
        for c in cand:
            if use_alive and not alive[conj_ad[c]]:
                continue
            rank = conj_rank[c]
            if rank == last:
                continue
            out[found] = rank
            found += 1
            last = rank
        if found > want:
            break
        width = next_width(found, w1, want, width, first_window, window_growth)
        w0 = w1
    return out[:found]


@njit(cache=True, nogil=True)
def window_end(w0: int, width: int, widest: int, n_conj: int) -> int:
    """The end of the window that starts at conjunction ``w0``: ``width`` ids (at most
    ``widest``), rounded up to a whole 64-bit word, and the rest of the segment when
    less than half a window would be left after it. The one window schedule: the
    compiled matcher and the numpy reference (:mod:`adfunnel.index.numpy_query`)
    both read it."""
    w1 = min(n_conj, w0 + min(width, widest))
    if w1 - w0 >= 64:
        w1 = min(n_conj, (w1 + 63) & ~63)
    if n_conj - w1 < min(width, widest) // 2:
        w1 = n_conj
    return w1


@njit(cache=True, nogil=True)
def next_width(found: int, w1: int, want: int, width: int, first_window: int,
               window_growth: int) -> int:
    """The next window's width after ``found`` ads matched in the first ``w1``
    conjunctions: enough for the missing ads at the rate seen so far (10 % spare), at
    least ``first_window``, at most ``window_growth`` times the last one."""
    rate = found / w1
    need = (want + 1 - found) / rate * 1.1 if rate > 0 else np.inf
    return int(max(first_window, min(need, width * window_growth)))


@njit(cache=True, nogil=True)
def _bitmap_window(w0: int, w1: int, n_slots: int, in_enc: np.ndarray, ins_cur: np.ndarray,
                   ins_stop: np.ndarray, not_conj: np.ndarray, nots_cur: np.ndarray,
                   nots_stop: np.ndarray, in_bits: np.ndarray, drows: np.ndarray,
                   dslots: np.ndarray, not_bits: np.ndarray, nrows: np.ndarray,
                   has_bits: np.ndarray) -> np.ndarray:
    """Conjunction ids in [w0, w1) matched, ascending: word by word."""
    b0 = w0 >> 6
    b1 = (w1 + 63) >> 6
    nw = b1 - b0
    hit = np.zeros((n_slots + 1, nw), np.uint64)
    for q in range(len(ins_cur)):
        for p in range(ins_cur[q], ins_stop[q]):
            e = np.int64(in_enc[p])
            c = e >> _SLOT_BITS
            hit[e & _SLOT_MASK, (c >> 6) - b0] |= _ONE << np.uint64(c & 63)
    for q in range(len(nots_cur)):
        for p in range(nots_cur[q], nots_stop[q]):
            c = np.int64(not_conj[p])
            hit[n_slots, (c >> 6) - b0] |= _ONE << np.uint64(c & 63)
    for i in range(len(drows)):
        r = drows[i]
        s = dslots[i]
        for w in range(nw):
            hit[s, w] |= in_bits[r, b0 + w]
    for r in nrows:
        for w in range(nw):
            hit[n_slots, w] |= not_bits[r, b0 + w]
    cand = np.empty(w1 - w0, np.int64)
    k = 0
    for w in range(nw):
        fail = hit[n_slots, w]
        for s in range(n_slots):
            fail |= has_bits[s, b0 + w] & ~hit[s, w]
        ok = ~fail
        lo = (b0 + w) << 6
        if lo < w0:
            ok &= _ALL << np.uint64(w0 - lo)
        if lo + 64 > w1:
            ok &= ~(_ALL << np.uint64(w1 - lo)) if w1 - lo < 64 else _ALL
        while ok != 0:
            low = ok & (~ok + _ONE)  # the lowest set bit
            cand[k] = lo + _bit_index(low)
            k += 1
            ok ^= low
    return cand[:k]


@njit(cache=True, nogil=True)
def _bit_index(low: np.uint64) -> int:
    """Position of the lowest set bit of ``low`` (≠ 0): one count-trailing-zeros."""
    return trailing_zeros(low)


@njit(cache=True, nogil=True)
def _row_ids(bits: np.ndarray, w0: int, w1: int) -> np.ndarray:
    """Set bit positions of one bitmap row within [w0, w1), ascending."""
    b0 = w0 >> 6
    b1 = (w1 + 63) >> 6
    out = np.empty(w1 - w0, np.int64)
    k = 0
    for w in range(b0, b1):
        word = bits[w]
        while word != 0:
            low = word & (~word + _ONE)
            c = (w << 6) + _bit_index(low)
            if w0 <= c < w1:
                out[k] = c
                k += 1
            word ^= low
    return out[:k]


@njit(cache=True, nogil=True)
def _sorted_window(w0: int, w1: int, in_enc: np.ndarray, ins_cur: np.ndarray,
                   ins_stop: np.ndarray, not_conj: np.ndarray, nots_cur: np.ndarray,
                   nots_stop: np.ndarray, in_bits: np.ndarray, drows: np.ndarray,
                   dslots: np.ndarray, not_bits: np.ndarray, nrows: np.ndarray,
                   zero_ids: np.ndarray, conj_k: np.ndarray) -> np.ndarray:
    """Conjunction ids in [w0, w1) matched, ascending, for a window of few entries: the
    conjunctions with K distinct slots hit, and the K = 0 ones, less the rejected."""
    n = 0
    for q in range(len(ins_cur)):
        n += ins_stop[q] - ins_cur[q]
    parts = [np.empty(n, np.int64)]
    k = 0
    for q in range(len(ins_cur)):
        for p in range(ins_cur[q], ins_stop[q]):
            parts[0][k] = np.int64(in_enc[p])
            k += 1
    for i in range(len(drows)):
        ids = _row_ids(in_bits[drows[i]], w0, w1)
        parts.append((ids << _SLOT_BITS) | dslots[i])
    total = 0
    for part in parts:
        total += len(part)
    enc = np.empty(total, np.int64)
    k = 0
    for part in parts:
        enc[k:k + len(part)] = part
        k += len(part)
    enc = np.sort(enc)
    z0 = np.searchsorted(zero_ids, w0)
    z1 = np.searchsorted(zero_ids, w1)
    cand = np.empty(total + z1 - z0, np.int64)
    k = 0
    i = 0
    while i < total:  # distinct (conjunction, slot) pairs, counted per conjunction
        c = enc[i] >> _SLOT_BITS
        hits = 0
        prev = -1
        while i < total and enc[i] >> _SLOT_BITS == c:
            if enc[i] != prev:
                hits += 1
                prev = enc[i]
            i += 1
        if hits == conj_k[c]:
            cand[k] = c
            k += 1
    for z in range(z0, z1):
        cand[k] = zero_ids[z]
        k += 1
    cand = np.sort(cand[:k])
    if not k:
        return cand
    negs = [np.empty(0, np.int64)]
    for q in range(len(nots_cur)):
        part = np.empty(nots_stop[q] - nots_cur[q], np.int64)
        for p in range(nots_cur[q], nots_stop[q]):
            part[p - nots_cur[q]] = np.int64(not_conj[p])
        negs.append(part)
    for r in nrows:
        negs.append(_row_ids(not_bits[r], w0, w1))
    n_neg = 0
    for part in negs:
        n_neg += len(part)
    if not n_neg:
        return cand
    neg = np.empty(n_neg, np.int64)
    k2 = 0
    for part in negs:
        neg[k2:k2 + len(part)] = part
        k2 += len(part)
    neg = np.sort(neg)
    keep = np.empty(len(cand), np.int64)
    k3 = 0
    j = 0
    for c in cand:
        while j < n_neg and neg[j] < c:
            j += 1
        if j < n_neg and neg[j] == c:
            continue
        keep[k3] = c
        k3 += 1
    return keep[:k3]


def warm_up() -> None:
    """Compile (or load from the cache) the matcher with a segment's argument types."""
    kids = np.zeros(0, dtype=np.int64)
    u32 = np.zeros(1, dtype=np.uint32)
    i64 = np.zeros(2, dtype=np.int64)
    bits = np.zeros((1, 1), dtype=np.uint64)
    for conj_ad in (np.zeros(1, dtype=np.int32), np.zeros(1, dtype=np.int64)):
        match_segment(kids, i64, u32, i64, u32, i64, i64, bits, i64, bits, bits, i64,
                      np.ones(1, dtype=np.uint8), np.zeros(1, dtype=np.int32), conj_ad,
                      np.zeros(1, dtype=bool), False, 1, 64, 2, 64, 256, 32)
