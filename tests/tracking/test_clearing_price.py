"""Clearing prices of OpenRTB notices: decimal CPM text → integer micros, rounded down,
refused with a reason (never a float, never in the advertiser's disfavour)."""

from __future__ import annotations

import pytest

from adfunnel.tracking.clearing_price import (
    MAX_CPM_MICROS,
    PriceRefused,
    cpm_micros,
    within_bid,
)


def test_a_price_is_rounded_down_to_whole_micros() -> None:
    """Breaks if the rounding is ROUND_HALF_UP / ROUND_HALF_EVEN (1_234_568), or if the
    default 28-digit context rounds the product up before the floor (1_000_000)."""
    assert cpm_micros("1.2345678") == 1_234_567
    assert cpm_micros("0.0000019") == 1
    assert cpm_micros("0.99999999999999999999999999999") == 999_999
    assert cpm_micros("2") == 2_000_000 and cpm_micros(".5") == 500_000


def test_the_exponent_form_some_exchanges_write_is_read() -> None:
    """Breaks if the pattern drops the exponent (Java's ``1.0E-4`` refused)."""
    assert cpm_micros("1.0E-4") == 100
    assert cpm_micros("1.5e2") == 150_000_000


@pytest.mark.parametrize(("text", "reason"), [
    (None, "missing"), ("", "missing"), ("  ", "missing"),
    ("${AUCTION_PRICE}", "unsubstituted"), ("x${AUCTION_PRICE}", "unsubstituted"),
    ("-1", "negative"), ("-0.000001", "negative"),
    ("abc", "not_a_number"), ("NaN", "not_a_number"), ("Infinity", "not_a_number"),
    ("1,5", "not_a_number"), ("0x10", "not_a_number"), ("1e999", "not_a_number"),
    ("1e7", "absurd"), ("9" * 40, "absurd"),
])
def test_bad_prices_are_refused_with_their_reason(text: str | None, reason: str) -> None:
    """Breaks if any of these is read as a number (e.g. NaN through Decimal, a missing
    price as 0, a negative one as its magnitude)."""
    with pytest.raises(PriceRefused) as info:
        cpm_micros(text)
    assert info.value.reason == reason and info.value.problem


def test_the_highest_price_is_accepted_and_one_micro_more_is_absurd() -> None:
    """Breaks if the bound is ``>=`` instead of ``>``."""
    assert cpm_micros(str(MAX_CPM_MICROS / 10**6).removesuffix(".0")) == MAX_CPM_MICROS
    with pytest.raises(PriceRefused):
        cpm_micros("1000000.000001")


def test_a_price_above_the_bid_is_refused_and_the_bid_itself_is_not() -> None:
    """Breaks if ``within_bid`` compares with ``>=`` or not at all."""
    assert within_bid("2.5", 2_500_000) == 2_500_000
    with pytest.raises(PriceRefused) as info:
        within_bid("2.500001", 2_500_000)
    assert info.value.reason == "above_bid"
