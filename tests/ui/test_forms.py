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
