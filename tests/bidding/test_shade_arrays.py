"""The array shading of many candidates (#27): equal to the scalar maximiser, never above
the bid it came with, at least the reserve in the bid's unit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.bidding.shade_arrays import shade_unit_bids, shaded_bids
from adfunnel.bidding.shading import WinCurve, shaded_bid

prices = st.lists(st.integers(0, 5_000_000), min_size=1, max_size=60)
values = st.lists(st.floats(-10.0, 8_000_000.0, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(prices, values, st.integers(2, 300))
def test_the_array_maximiser_equals_the_scalar_one(observed: list[int], vs: list[float],
                                                   knots: int) -> None:
    """Red when the array version keeps the lowest maximiser among ties (``argmax`` of
    the surplus not reversed), or lets a knot above the value count."""
    curve = WinCurve.from_prices(observed, knots)
    assert shaded_bids(np.array(vs), curve).tolist() == [shaded_bid(v, curve) for v in vs]


def test_ties_go_to_the_highest_bid_and_knots_above_the_value_never_count() -> None:
    """Prices 2, 4 and 100: at value 6, bids 2 and 4 tie at a surplus of 4 (the highest
    is kept); 100 is above the value, 1.5 below every price (no bid). Red when the array
    keeps the lowest maximiser, or bids where no surplus is positive."""
    curve = WinCurve.from_prices([2, 4, 100])
    assert shaded_bids(np.array([6.0, 1.5]), curve).tolist() == [4, 0] == [
        shaded_bid(6.0, curve), shaded_bid(1.5, curve)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=12),
       st.lists(st.integers(0, 60), min_size=1, max_size=20))
def test_curves_read_from_json_with_flat_or_zero_counts(steps: list[tuple[int, int]],
                                                        vs: list[int]) -> None:
    """A released curve may repeat counts or start at 0 (``from_json`` checks only that
    they never decrease): red when the envelope bids on a line of count 0, or keeps the
    lower of two equal lines."""
    prices, cum, p, c = [], [], -1, 0
    for dp, dc in steps:
        p, c = p + 1 + dp, c + dc
        prices.append(p)
        cum.append(c)
    curve = WinCurve(tuple(prices), tuple(cum), max(cum[-1], 1))
    assert shaded_bids(np.array(vs, dtype=np.float64), curve).tolist() == [
        shaded_bid(v, curve) for v in vs]


def test_values_too_large_for_int64_take_the_exact_path() -> None:
    """Red when the overflow guard is dropped (the int64 surplus wraps)."""
    curve = WinCurve.from_prices([1, 2**40, 2**45])
    huge = [2.0**61, 2.0**62]
    assert shaded_bids(np.array(huge), curve).tolist() == [shaded_bid(v, curve) for v in huge]


@settings(max_examples=200, deadline=None)
@given(prices, st.lists(st.tuples(st.integers(1, 50_000_000), st.floats(1e-6, 1.0),
                                  st.sampled_from([0, 0, 100, -200, 1_500])),
                        min_size=1, max_size=30),
       st.sampled_from([0, 500_000, 3_000_000]))
def test_shaded_bids_stay_between_the_reserve_and_the_bid(
        observed: list[int], cands: list[tuple[int, float, int]], reserve_cpm: int) -> None:
    """Red when the shaded bid is not capped at the unshaded one (a rounded-up unit bid
    exceeds it), or not raised to the reserve in its unit."""
    bids = np.array([c[0] for c in cands], dtype=np.int64)
    rates = np.array([c[1] for c in cands])
    quality = np.array([c[2] for c in cands], dtype=np.float64)
    out = shade_unit_bids(bids, rates, quality, WinCurve.from_prices(observed), reserve_cpm / 1000)
    assert (out <= bids).all() and (out >= 1).all()
    floor = [math.ceil(reserve_cpm / 1000 / r) for r in rates]
    assert all(o >= min(f, b) for o, f, b in zip(out.tolist(), floor, bids.tolist(), strict=True))


def test_a_cpc_bid_is_shaded_to_the_curves_optimum_in_its_unit() -> None:
    """Prices to beat uniform on 1,000..10,000 micros per impression, a CPC bid of 2.00 at
    a pCTR of 1 %: value 20,000 per impression caps nothing, the optimum of
    (20,000 − b) × P(b) is the highest price, 10,000 → 1.00 per click. Red when the
    per-impression bid is not divided back by the pCTR."""
    curve = WinCurve.from_prices(range(1_000, 10_001, 1_000))
    out = shade_unit_bids(np.array([2_000_000]), np.array([0.01]), np.array([0.0]), curve, 0.0)
    assert out.tolist() == [1_000_000]
    # value 10,000 per impression: the optimum of (10,000 − b) × b / 10,000 is 5,000
    out = shade_unit_bids(np.array([1_000_000]), np.array([0.01]), np.array([0.0]), curve, 0.0)
    assert out.tolist() == [500_000]
