"""The money rounding rules: exact per-mille billing with a carried fraction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.money import (
    MoneyError,
    bill_per_mille,
    cpm_to_impression,
    impression_charge_bound,
)


def test_cpm_1500_bills_one_and_two_micros_alternately() -> None:
    """1,500 µ per mille is 1.5 µ an impression: 1, 2, 1, 2, … never 2, 2, 2 (issue 7 §4)."""
    carry, billed = 0, []
    for _ in range(6):
        due, carry = bill_per_mille(carry, 1_500)
        billed.append(due)
    assert billed == [1, 2, 1, 2, 1, 2]
    assert carry == 0


@settings(max_examples=300, deadline=None)
@given(prices=st.lists(st.integers(0, 10**9), max_size=200))
def test_billed_total_within_one_micro_below_exact(prices: list[int]) -> None:
    carry, total = 0, 0
    for price in prices:
        due, carry = bill_per_mille(carry, price)
        assert 0 <= due <= impression_charge_bound(price)  # never rounded up
        total += due
        assert 0 <= carry < 1_000
    exact_millimicros = sum(prices)
    assert 1_000 * total + carry == exact_millimicros
    assert 1_000 * total <= exact_millimicros < 1_000 * (total + 1)


def test_bound_and_floor() -> None:
    assert [impression_charge_bound(p) for p in (0, 1, 999, 1_000, 1_001, 1_500)] == [
        0, 1, 1, 1, 2, 2,
    ]
    assert [cpm_to_impression(p) for p in (0, 999, 1_000, 1_500, 1_999)] == [0, 0, 1, 1, 1]


@pytest.mark.parametrize(("carry", "price"), [(-1, 5), (1_000, 5), (0, -1)])
def test_bad_carry_or_price_is_refused(carry: int, price: int) -> None:
    with pytest.raises(MoneyError):
        bill_per_mille(carry, price)


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_money_shown_to_people_hides_nothing(micros: int) -> None:
    """What the dashboard shows reads back to the exact micros (0.669 USD, not 0.66 for
    669,000 micros), with at least two decimals. Mutation seen red: cents truncated."""
    from decimal import Decimal

    from adfunnel.money import format_units

    text = format_units(micros)
    assert len(text.split(".")[1]) >= 2
    assert Decimal(text.replace(",", "")) * 1_000_000 == micros
