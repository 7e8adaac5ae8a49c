"""First-price shading: the surplus-maximising bid from a win curve, property-tested."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.bidding.shading import ShadingModel, ShadingTable, WinCurve, fit, shaded_bid

price_lists = st.lists(st.integers(0, 10**6), min_size=1, max_size=300)
curves = st.builds(WinCurve.from_prices, price_lists, st.integers(2, 64))


@settings(max_examples=300, deadline=None)
@given(curves, st.floats(0, 2e6))
def test_shaded_bid_is_never_above_the_value(curve, value) -> None:
    """Red when candidates are not limited to knots ≤ value and the zero-surplus check is
    dropped (either alone keeps it green: they guard each other)."""
    bid = shaded_bid(value, curve)
    assert 0 <= bid <= value


@settings(max_examples=300, deadline=None)
@given(curves, st.integers(0, 2 * 10**6), st.integers(0, 2 * 10**6))
def test_shaded_bid_is_non_decreasing_in_value(curve, a, b) -> None:
    """Red when the value wraps (v mod 0.7 USD): a larger value bidding less."""
    lo, hi = min(a, b), max(a, b)
    assert shaded_bid(lo, curve) <= shaded_bid(hi, curve)


@settings(max_examples=100, deadline=None)
@given(st.integers(10, 2000), st.integers(2, 4000))
def test_uniform_prices_give_half_the_value(m, value) -> None:
    """P(win | b) = b ÷ M (prices 1..M): the surplus (v − b) b / M peaks at v / 2. Red when
    the surplus forgets the price paid (maximises v × P(win))."""
    curve = WinCurve.from_prices(range(1, m + 1), max_knots=m)
    v = min(value, m)
    assert abs(shaded_bid(v, curve) - v / 2) <= 0.5


def test_no_bid_when_nothing_is_profitable() -> None:
    """Every price to beat is at or above the value: no bid. Red when the zero-surplus
    check is dropped."""
    curve = WinCurve.from_prices([500, 600, 700])
    assert shaded_bid(500, curve) == 0
    assert shaded_bid(499, curve) == 0
    assert shaded_bid(601, curve) == 500


def test_thinned_curve_never_overstates_the_win_probability() -> None:
    """Red when thinning keeps the next knot's count for a dropped one."""
    prices = list(range(1, 1001))
    curve = WinCurve.from_prices(prices, max_knots=10)
    assert len(curve.prices) <= 10
    for b in range(0, 1100, 7):
        assert curve.p_win(b) <= min(b, 1000) / 1000 + 1e-12


def test_back_off_to_a_coarser_segment_with_few_observations() -> None:
    """Red when curve_for returns the finest segment regardless of its size."""
    obs = [("p1", "300x250", 9, 100 + i) for i in range(300)]
    obs += [("p1", "300x250", 10, 5000 + i) for i in range(5)]
    model = fit(obs, min_observations=50)
    assert model.curve_for("p1", "300x250", 9).n == 300
    assert model.curve_for("p1", "300x250", 10).n == 305  # backed off to placement × size
    assert model.curve_for("p2", "728x90", 3).n == 305  # unknown placement: the global curve


def test_json_round_trip_and_validation() -> None:
    """Red when from_json skips the step-function check."""
    model = fit([("p", "s", h, 10 * h + i) for h in range(3) for i in range(50)])
    again = ShadingModel.from_json(model.to_json())
    assert again == model
    bad = model.to_json().replace('"cum": [1,', '"cum": [999,')
    with pytest.raises(ValueError):
        ShadingModel.from_json(bad)


@pytest.mark.slow  # about 15 s: each example builds a table a micro at a time
@settings(max_examples=100, deadline=None)
@given(curves, st.lists(st.integers(0, 3 * 10**6), min_size=1, max_size=30),
       st.integers(10, 3 * 10**5))  # the table is built a micro at a time: kept short
def test_table_lookup_equals_the_shaded_bid(curve, values, max_value) -> None:
    """Red when a table cut short at max_value is marked saturated (values beyond it then
    read as its last bid)."""
    table = ShadingTable.build(curve, max_value=max_value)
    got = table.lookup(np.array(values))
    assert got.tolist() == [shaded_bid(v, curve) for v in values]
