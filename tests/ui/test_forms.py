"""The dashboard's form parsers: money typed in units becomes exact micros."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.ui.forms import (
    FieldProblem,
    dayparts_from_form,
    int_field,
    json_field,
    micros_to_units,
    submitted_rows,
    units_to_micros,
)
from adfunnel.ui.selling import goal_from_form


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


class _CountingForm(dict[str, str]):
    """A submitted form that fails the test once it has been asked for too many rows."""

    def __init__(self, **fields: str) -> None:
        super().__init__(fields)
        self.asked = 0

    def getlist(self, name: str) -> list[str]:
        self.asked += 1
        assert self.asked <= 1_000, "the form's row count was trusted"
        return []


def test_a_huge_daypart_row_count_is_a_field_problem_not_a_hang() -> None:
    """The dayparts form's hidden ``rows`` is the page's, but anyone can post it: a count
    of 10^9 must not make the server loop over a billion rows (tried: an advertiser's
    ``rows=3000000`` held the event loop, and every ad request, for 3.5 s). Breaks if
    ``dayparts_from_form`` or ``submitted_rows`` loops to the count posted."""
    form = _CountingForm(rows="1000000000", version="1")
    with pytest.raises(FieldProblem) as err:
        dayparts_from_form(form)
    assert err.value.field == "dayparts" and "at most" in err.value.problem
    assert len(submitted_rows(form)) <= 1_000


@pytest.mark.parametrize("text", ["0,50", "1,5", "12,50", "1,00,000", ",5", "1,000,0"])
def test_a_comma_that_does_not_separate_thousands_is_refused(text: str) -> None:
    """A comma is read as a thousands separator (``1,000.25``), so a decimal comma was
    dropped silently: a bid typed ``0,50`` became 50.00, a hundred times the bid meant
    (tried on the new-campaign form). Breaks if a comma anywhere but between groups of
    three digits is taken."""
    with pytest.raises(FieldProblem) as err:
        units_to_micros(text, "bid_micros")
    assert err.value.field == "bid_micros" and "comma" in err.value.problem
    with pytest.raises(FieldProblem):
        goal_from_form({"priority": "guaranteed", "goal_total": text})
    assert units_to_micros("1,234,567.5", "bid_micros") == 1_234_567_500_000
    assert goal_from_form({"priority": "guaranteed", "goal_total": "2,000,000"}) == {
        "metric": "impressions", "total": 2_000_000}
