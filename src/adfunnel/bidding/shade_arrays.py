"""First-price shading of many candidates at once, in the bid's unit. Pure.

:func:`adfunnel.bidding.shading.shaded_bid` answers one value per call; the ad server
shades every automatic candidate of a first-price slot run, so :func:`shaded_bids` is
the same maximiser over an array of values (equal to it element by element,
property-tested) and :func:`shade_unit_bids` turns a candidate's bid in its unit (per
mille / click / conversion, after λ) into its shaded bid in that unit. Both deciders
(columnar and reference) call :func:`shade_unit_bids`, so the two paths shade alike by
construction.

The curve's prices are *totals* per impression (value + quality, the auction's rank
key: what the winner had to reach, :mod:`adfunnel.serving.beats`). A candidate of
quality q bidding b per impression reaches the total t = b + q, so its surplus
(v − b) × P(beat ≤ b + q) is ((v + q) − t) × P(beat ≤ t): the shaded total is
``shaded_bid(v + q)`` and the per-impression bid that total less q.
"""

from __future__ import annotations

import functools

import numpy as np

from adfunnel.bidding.shading import WinCurve, shaded_bid
from adfunnel.bidding.strategy import MIN_BID_MICROS


def shaded_bids(values_micros: np.ndarray, curve: WinCurve) -> np.ndarray:
    """:func:`~adfunnel.bidding.shading.shaded_bid` of each value (micros per impression,
    floats): int64 bids, 0 where no bid has a positive expected surplus; equal to it
    element by element (property-tested), in O(log knots) per value.

    The surplus of knot j at value v is the line cum_j × (v − b_j) (b_j its price, at
    least ``MIN_BID_MICROS``); slopes increase with j, so the highest maximiser is read
    off the lines' upper envelope (:func:`_envelope`, exact integer breakpoints), and it
    is positive exactly when v > b_j and c_j > 0. Values from 2**53 on take the scalar function.
    """
    values = np.asarray(values_micros, dtype=np.float64)
    v = np.where(values >= 0, np.floor(np.nan_to_num(values, nan=0.0, posinf=2.0**63)), 0.0)
    big = v >= 2.0**53
    v_int = np.where(big, 0, v).astype(np.int64)
    starts, knots, counts = _envelope(curve)
    at = np.searchsorted(starts, v_int, side="right") - 1
    best = knots[at]
    out = np.where((v_int >= MIN_BID_MICROS) & (v_int > best) & (counts[at] > 0), best, 0)
    for i in np.flatnonzero(big).tolist():
        out[i] = shaded_bid(float(values[i]), curve)
    return out.astype(np.int64)


@functools.lru_cache(maxsize=4096)
def _envelope(curve: WinCurve) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The upper envelope of the surplus lines cum_j × (v − b_j): (the least integer
    value from which each envelope line is the highest maximiser, increasing; its knot
    price b_j; its count c_j), int64. Line k beats line j < k (ties to k) from
    ⌈(c_k b_k − c_j b_j) ÷ (c_k − c_j)⌉ on (c the counts, non-decreasing)."""
    lines: list[tuple[int, int]] = []  # (count, knot price)
    starts: list[int] = []
    for c, p in zip(curve.cum, curve.prices, strict=True):
        b = max(p, MIN_BID_MICROS)
        while lines:
            cj, bj = lines[-1]
            # an equal count: the line is never above the last one (b ≥ its b)
            t = _ceil_div(c * b - cj * bj, c - cj) if c > cj else _NEVER
            if t > starts[-1]:
                break
            lines.pop()
            starts.pop()
        if lines and t >= _NEVER:
            continue
        starts.append(t if lines else _FIRST)
        lines.append((c, b))
    return (np.array(starts, dtype=np.int64), np.array([b for _, b in lines], dtype=np.int64),
            np.array([c for c, _ in lines], dtype=np.int64))


_FIRST = -(2**62)
_NEVER = 2**62


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def shade_unit_bids(bids: np.ndarray, rates: np.ndarray, quality: np.ndarray,
                    curve: WinCurve, reserve_per_impression: float) -> np.ndarray:
    """The shaded bids in each candidate's unit (int64 micros per mille / click /
    conversion) of candidates bidding ``bids`` (their unshaded bids in that unit) at
    action rates ``rates`` (actions per impression) with ``quality`` (micros per
    impression).

    The shaded total t = :func:`shaded_bids` (bid × rate + quality) is bid as
    ⌈(t − quality) ÷ rate⌉ in the unit (rounded up so the total reaches t), raised to
    the reserve in the unit ⌈reserve ÷ rate⌉ (no bid under it can win: the curve's
    prices mix slots with other reserves) and to ``MIN_BID_MICROS``, and never above
    the unshaded bid. A candidate with no action rate keeps its bid.

    Invariants (property-tested): MIN_BID_MICROS ≤ shaded ≤ unshaded wherever the
    unshaded bid is ≥ MIN_BID_MICROS; equal to the scalar path.
    """
    bids = np.asarray(bids, dtype=np.int64)
    rates = np.asarray(rates, dtype=np.float64)
    quality = np.asarray(quality, dtype=np.float64)
    if not len(bids):
        return bids.copy()
    positive = rates > 0
    safe = np.where(positive, rates, 1.0)
    target = shaded_bids(bids * rates + quality, curve).astype(np.float64)
    in_unit = np.ceil((target - quality) / safe)
    floor = np.ceil(reserve_per_impression / safe)
    shaded = np.maximum(np.maximum(in_unit, floor), MIN_BID_MICROS)
    shaded = np.minimum(shaded, bids.astype(np.float64)).astype(np.int64)
    return np.where(positive, shaded, bids)
