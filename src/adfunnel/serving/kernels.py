"""Compiled loops of the columnar decision (numba), one pass each over a decision's
candidates instead of a dozen numpy expressions (issue "The decision at catalogue
scale": at 100,000 campaigns a decision's per-candidate work was a few hundred numpy
calls, each a random gather through megabytes of columns).

Every kernel is the loop form of what :mod:`adfunnel.serving.decider` computed with
numpy before, to the same values: the differential test (columnar path against the
per-candidate reference path) and the decision benchmark's ``agreement`` hold it to
that. Pure: arrays in, arrays out; no I/O, no clock.

Compiled on first use and cached on disk (``cache=True``); :func:`warm_up` compiles
them all at start-up, so the first decision is not late.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from adfunnel.auction.draws import unit_base, unit_of

__all__ = ["campaign_checks", "candidate_fields", "decisive_prefix", "gate_inputs",
           "mask_ads", "paced_out", "totals", "warm_up"]

#: reason codes the kernels write (the indices of :data:`adfunnel.serving.stages.filter.REASONS`)
R_AD_PAUSED, R_NO_FITTING_SLOT = 1, 2
#: Extractions of the best remaining candidate before the rest is sorted at once.
_EXTRACT = 24


@njit(cache=True, nogil=True)
def mask_ads(ids: np.ndarray, ads: np.ndarray, campaigns: np.ndarray,
             shape_reason: np.ndarray, counts: np.ndarray, max_dense: int,
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Step 1 over retrieved ad ids (all ``< len(ads)``; records of
    :data:`~adfunnel.serving.columns.AD_FIELDS` and ``CAMPAIGN_FIELDS``): (kept ids,
    their campaign ids, the ad versions read, whether some ad's campaign id is ``≥
    max_dense``). An ad's version is read before its other fields. Ads whose campaign
    the records do not hold are dropped without a reason; the others out add one to
    ``counts[code]``: paused, or ``shape_reason[shape]`` (0: a slot of the request
    takes the shape and the placement allows it; a shape beyond the table fits no
    slot)."""
    n = len(ids)
    n_c = len(campaigns)
    n_s = len(shape_reason)
    keep = np.empty(n, np.int64)
    camp = np.empty(n, np.int64)
    ver = np.empty(n, np.int64)
    k = 0
    big = False
    for i in range(n):
        a = ids[i]
        rec = ads[a]
        v = rec["version"]
        c = rec["campaign"]
        if c >= max_dense:
            big = True
        if c < 0 or c >= n_c or campaigns[c]["status"] < 0:
            continue
        if not rec["active"]:
            counts[R_AD_PAUSED] += 1
            continue
        sh = rec["shape"]
        r = shape_reason[sh] if 0 <= sh < n_s else R_NO_FITTING_SLOT
        if r != 0:
            counts[r] += 1
            continue
        keep[k] = a
        camp[k] = c
        ver[k] = v
        k += 1
    return keep[:k], camp[:k], ver[:k], big


@njit(cache=True, nogil=True)
def campaign_checks(camp: np.ndarray, scratch: np.ndarray, campaigns: np.ndarray,
                    dayparts: np.ndarray, ordinals: np.ndarray, hours: np.ndarray,
                    status_reason: np.ndarray, code_flight: int, code_daypart: int,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                               np.ndarray, np.ndarray]:
    """Steps 2-3 before the budget gate, over candidates' campaign ids (records held):
    (the distinct ids in first-seen order, each entry's index in them, and per
    distinct campaign: its version read before its other fields, its reason code —
    status, else out of flight, else outside its daypart, 0 = still in —, its local
    date ordinal, the most one event can cost and its [daily, lifetime] budgets, the
    budget gate's inputs). ``scratch``: int64 ≥ every id, all −1, left so."""
    n = len(camp)
    uc = np.empty(n, np.int64)
    inverse = np.empty(n, np.int64)
    m = 0
    for i in range(n):
        c = camp[i]
        j = scratch[c]
        if j < 0:
            scratch[c] = m
            uc[m] = c
            inverse[i] = m
            m += 1
        else:
            inverse[i] = j
    for j in range(m):
        scratch[uc[j]] = -1
    cver = np.empty(m, np.int64)
    verdict = np.empty(m, np.int8)
    local = np.empty(m, np.int32)
    charge = np.empty(m, np.int64)
    budgets = np.empty((m, 2), np.int64)
    for j in range(m):
        rec = campaigns[uc[j]]
        cver[j] = rec["version"]
        st = rec["status"]
        r = status_reason[st] if st >= 0 else status_reason[1]  # none: as if paused
        charge[j] = rec["charge"]
        budgets[j, 0] = rec["daily"]
        budgets[j, 1] = rec["lifetime"]
        z = rec["zone"]
        if z >= len(ordinals):  # a zone new since ``ordinals`` was made: not in flight now
            local[j] = 0
            verdict[j] = r if r != 0 else code_flight
            continue
        d = ordinals[z]
        local[j] = d
        if r == 0 and (d < rec["start"] or d > rec["end"]):
            r = code_flight
        dp = rec["daypart"]
        if r == 0 and (dp >= dayparts.shape[0] or not dayparts[dp, hours[z]]):
            r = code_daypart  # (a daypart code newer than ``dayparts``: not now)
        verdict[j] = r
    return uc[:m], inverse, cver, verdict, local, charge, budgets


@njit(cache=True, nogil=True)
def candidate_fields(ids: np.ndarray, camp: np.ndarray, ads: np.ndarray,
                     campaigns: np.ndarray,
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per candidate, what pre-rank and the auction read: (shape code, quality, bid
    type code, bid, advertiser id)."""
    n = len(ids)
    shape = np.empty(n, np.int32)
    quality = np.empty(n, np.int64)
    bid_type = np.empty(n, np.int8)
    bid = np.empty(n, np.int64)
    adv = np.empty(n, np.int64)
    for i in range(n):
        a = ads[ids[i]]
        c = campaigns[camp[i]]
        shape[i] = a["shape"]
        quality[i] = a["quality"]
        bid_type[i] = c["bid_type"]
        bid[i] = c["bid"]
        adv[i] = c["advertiser"]
    return shape, quality, bid_type, bid, adv


@njit(cache=True, nogil=True)
def totals(bid_type: np.ndarray, bid: np.ndarray, quality: np.ndarray, pctr: np.ndarray,
           pcvr: float) -> tuple[np.ndarray, np.ndarray]:
    """(action rate, total value per impression) of each candidate (DESIGN.md §The
    funnel, step 6): rate = 1/1000 (CPM), pCTR (CPC) or pCTR × pCVR (CPA); total =
    bid × rate + quality, micros."""
    n = len(bid)
    rate = np.empty(n, np.float64)
    total = np.empty(n, np.float64)
    for i in range(n):
        t = bid_type[i]
        r = 1.0 / 1000.0 if t == 0 else (pctr[i] if t == 1 else pctr[i] * pcvr)
        rate[i] = r
        total[i] = bid[i] * r + quality[i]
    return rate, total


@njit(cache=True, nogil=True)
def gate_inputs(cids: np.ndarray, campaigns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the most one event can cost, [daily, lifetime] budgets) of each campaign."""
    n = len(cids)
    charge = np.empty(n, np.int64)
    budgets = np.empty((n, 2), np.int64)
    for i in range(n):
        rec = campaigns[cids[i]]
        charge[i] = rec["charge"]
        budgets[i, 0] = rec["daily"]
        budgets[i, 1] = rec["lifetime"]
    return charge, budgets


@njit(cache=True, nogil=True)
def paced_out(base: np.uint64, cids: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The pacing coin of each campaign: True where its draw ``unit(seed, id,
    PACING_COIN) ≥ p`` (``base`` = :func:`~adfunnel.auction.draws.unit_base`)."""
    out = np.empty(len(cids), np.bool_)
    for i in range(len(cids)):
        out[i] = unit_of(base, cids[i]) >= p[i]
    return out


@njit(cache=True, nogil=True)
def _better(t_a: float, u_a: float, t_b: float, u_b: float) -> bool:
    return t_a > t_b or (t_a == t_b and u_a < u_b)


@njit(cache=True, nogil=True)
def decisive_prefix(eligible: np.ndarray, total: np.ndarray, ids: np.ndarray,
                    camp: np.ndarray, adv: np.ndarray, keep: int, need: int,
                    tie_base: np.uint64) -> tuple[np.ndarray, int]:
    """The auction's decisive prefix of the ranking of ``eligible`` (candidate indices),
    and how many pre-rank kept.

    Pre-rank keeps the best ``keep`` by ``total`` (ties at the cut kept). They rank by
    total descending, then by the tie key ``unit(seed, ad id, TIE_BREAK)`` ascending,
    then by position in ``eligible`` — ``np.lexsort((ties, -total))`` over them. The
    prefix ends at the ``need``-th candidate whose campaign and advertiser are new to
    it (one per campaign and advertiser per page); without one it is the whole ranking
    of what was kept, and the cut widens fourfold while eligible candidates remain.
    """
    n = len(eligible)
    while True:
        if n > keep:
            neg = np.empty(n, np.float64)
            for i in range(n):
                neg[i] = -total[eligible[i]]
            cut = -np.partition(neg, keep - 1)[keep - 1]
        else:
            cut = -np.inf
        chosen = np.empty(n, np.int64)
        k = 0
        for i in range(n):
            if total[eligible[i]] >= cut:
                chosen[k] = eligible[i]
                k += 1
        chosen = chosen[:k]
        ties = np.empty(k, np.float64)
        for j in range(k):
            ties[j] = unit_of(tie_base, ids[chosen[j]])
        prefix, found = _walk(chosen, total, ties, camp, adv, need)
        if found or k == n:
            return prefix, k
        keep *= 4


@njit(cache=True, nogil=True)
def _walk(chosen: np.ndarray, total: np.ndarray, ties: np.ndarray, camp: np.ndarray,
          adv: np.ndarray, need: int) -> tuple[np.ndarray, bool]:
    """Walk ``chosen`` best first (see :func:`decisive_prefix`) to the decisive end:
    the best remaining is extracted one at a time, and after ``_EXTRACT`` of them the
    rest is sorted at once."""
    k = len(chosen)
    used = np.zeros(k, np.bool_)
    prefix = np.empty(k, np.int64)
    seen_c = np.empty(need, np.int64)
    seen_a = np.empty(need, np.int64)
    got = 0
    steps = 0
    while steps < k:
        if steps < _EXTRACT:
            best = -1
            for j in range(k):
                if used[j]:
                    continue
                if best < 0 or _better(total[chosen[j]], ties[j], total[chosen[best]],
                                       ties[best]):
                    best = j
            order = np.empty(1, np.int64)
            order[0] = best
        else:
            order = _rest_ranked(chosen, total, ties, used)
        for best in order:
            used[best] = True
            i = chosen[best]
            prefix[steps] = i
            steps += 1
            c, a = camp[i], adv[i]
            fresh = True
            for q in range(got):
                if seen_c[q] == c or seen_a[q] == a:
                    fresh = False
                    break
            if fresh:
                seen_c[got] = c
                seen_a[got] = a
                got += 1
                if got == need:
                    return prefix[:steps], True
    return prefix[:steps], False


@njit(cache=True, nogil=True)
def _rest_ranked(chosen: np.ndarray, total: np.ndarray, ties: np.ndarray,
                 used: np.ndarray) -> np.ndarray:
    """Positions in ``chosen`` not used yet, ranked (total desc, tie asc, position)."""
    rest = np.flatnonzero(~used)
    by_tie = rest[np.argsort(ties[rest], kind="mergesort")]
    neg = np.empty(len(by_tie), np.float64)
    for j in range(len(by_tie)):
        neg[j] = -total[chosen[by_tie[j]]]
    return by_tie[np.argsort(neg, kind="mergesort")]


def warm_up() -> None:
    """Compile (or load from the cache) every kernel with the types a decision uses."""
    from adfunnel.serving.columns import AD_FIELDS, CAMPAIGN_FIELDS

    i64 = np.zeros(1, np.int64)
    ads = np.zeros(1, AD_FIELDS)
    campaigns = np.zeros(1, CAMPAIGN_FIELDS)
    counts = np.zeros(16, np.int64)
    mask_ads(i64, ads, campaigns, np.zeros(1, np.int8), counts, 1 << 26)
    campaign_checks(i64, np.full(1, -1, np.int64), campaigns, np.ones((1, 168), np.bool_),
                    np.zeros(1, np.int32), np.zeros(1, np.int16), np.zeros(4, np.int8), 1, 2)
    candidate_fields(i64, i64, ads, campaigns)
    totals(np.zeros(1, np.int8), i64, i64, np.zeros(1), 0.01)
    gate_inputs(i64, campaigns)
    base = unit_base(0, 0)
    paced_out(base, i64, np.ones(1))
    decisive_prefix(i64, np.zeros(1), i64, i64, i64, 1, 2, base)
