"""The automatic bid: value ÷ λ in integer micros, property-tested."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.bidding.strategy import auto_bid_micros, auto_bids_micros, value_per_impression_micros
from adfunnel.pacing.bid_multiplier import LAMBDA_MAX

values = st.floats(0, 1e12)
lams = st.floats(0.5, LAMBDA_MAX)


@given(values, lams)
def test_bid_is_never_above_the_value_and_is_an_integer(value, lam) -> None:
    """Red when neither λ < 1 is read as 1 nor the bid is capped at the value."""
    bid = auto_bid_micros(value, lam)
    assert isinstance(bid, int)
    assert 0 <= bid <= value


@given(values, values, lams)
def test_bid_is_monotone_in_value(a, b, lam) -> None:
    """Red when values of 1 USD and more bid the one-micro minimum."""
    lo, hi = min(a, b), max(a, b)
    assert auto_bid_micros(lo, lam) <= auto_bid_micros(hi, lam)


@given(values, lams, lams)
def test_bid_falls_as_lambda_rises(value, a, b) -> None:
    """Red when the bid is value × λ."""
    lo, hi = min(a, b), max(a, b)
    assert auto_bid_micros(value, hi) <= auto_bid_micros(value, lo)


def test_the_bid_is_the_floor_of_value_over_lambda_and_at_least_one_micro() -> None:
    """Red when the floor becomes a round, or the one-micro minimum is dropped."""
    assert auto_bid_micros(1_000_000, 3.0) == 333_333
    assert auto_bid_micros(2_000_000, 3.0) == 666_666
    assert auto_bid_micros(5, LAMBDA_MAX) == 1
    assert auto_bid_micros(0.5, 1.0) == 0


def test_value_per_impression() -> None:
    """Red when the conversion value forgets pCVR."""
    assert value_per_impression_micros(0.01, 0.5, 2_000_000, "click") == pytest.approx(20_000)
    assert value_per_impression_micros(0.01, 0.5, 2_000_000, "conversion") == pytest.approx(
        10_000)
    with pytest.raises(ValueError):
        value_per_impression_micros(0.01, 0.5, 1, "view")  # type: ignore[arg-type]


@given(st.lists(st.tuples(values, lams), min_size=1, max_size=50))
def test_array_bids_equal_the_scalar_bid(pairs) -> None:
    """Red when the array version rounds where the scalar one floors."""
    v = np.array([p[0] for p in pairs])
    lam = np.array([p[1] for p in pairs])
    assert auto_bids_micros(v, lam).tolist() == [auto_bid_micros(a, b) for a, b in pairs]
