"""The dashboard's form parsers: money typed in units becomes exact micros."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.ui.forms import FieldProblem, int_field, json_field, micros_to_units, units_to_micros


@pytest.mark.parametrize(("text", "micros"), [
    ("12.5", 12_500_000), ("0", 0), ("0.000001", 1), ("1,000.25", 1_000_250_000),
    (" 3 ", 3_000_000),
])
def test_units_to_micros(text: str, micros: int) -> None:
    assert units_to_micros(text, "f") == micros


@pytest.mark.parametrize(("text", "problem"), [
    ("abc", "amount like"), ("-1", "at least 0"), ("0.0000001", "6 decimals"),
    ("NaN", "at least 0"), ("", "amount like"),
])
def test_units_to_micros_names_the_field(text: str, problem: str) -> None:
    with pytest.raises(FieldProblem) as err:
        units_to_micros(text, "daily_budget_micros")
    assert err.value.field == "daily_budget_micros" and problem in err.value.problem


@pytest.mark.parametrize(("text", "problem"), [
    ("1e999999999", "too large"), ("1" * 5_000, "too large"), ("1e-999999999", "6 decimals"),
    ("0." + "0" * 5_000 + "1", "6 decimals"),
])
def test_absurd_amounts_are_a_field_problem_not_a_500(text: str, problem: str) -> None:
    """A typed amount whose exponent or length is absurd (the Bidding form's cap, a
    budget) is a problem of its field. Breaks if ``units_to_micros`` multiplies before
    bounding it (tried: the ``adjusted()`` bound removed: ``decimal.Overflow`` and int
    conversion's ``ValueError`` escape, a 500 on ``POST /ui/campaigns/{id}/bidding``),
    or checks the decimals after a multiplication that underflows (``1e-999999999``
    read as 0)."""
    with pytest.raises(FieldProblem) as err:
        units_to_micros(text, "bid_cap_micros")
    assert err.value.field == "bid_cap_micros" and problem in err.value.problem


@given(st.integers(min_value=0, max_value=10**15))
def test_units_round_trip(micros: int) -> None:
    assert units_to_micros(micros_to_units(micros), "f") == micros


def test_json_and_int_fields() -> None:
    assert json_field("", "targeting") is None
    assert json_field('{"attr": "os", "in": ["ios"]}', "targeting") == {"attr": "os",
                                                                        "in": ["ios"]}
    with pytest.raises(FieldProblem, match="line 1, column 10"):
        json_field('{"attr": ', "targeting")
    with pytest.raises(FieldProblem, match="whole number"):
        int_field("1.5", "version")
