"""``parse_partitions``: the ``--partitions`` option of ``adfunnel aggregator``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.cli.processes import parse_partitions


def test_none_means_every_partition() -> None:
    assert parse_partitions(None, 16) is None


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0", [0]),
        ("15", [15]),
        ("0-3", [0, 1, 2, 3]),
        ("0-3,8", [0, 1, 2, 3, 8]),
        ("8,0-3", [0, 1, 2, 3, 8]),  # sorted
        ("2-2", [2]),
        ("1,1,0-2", [0, 1, 2]),  # overlaps counted once
        (" 1 , 4-5 ", [1, 4, 5]),  # spaces around the parts
        ("0-15", list(range(16))),
    ],
)
def test_numbers_ranges_and_lists(text: str, want: list[int]) -> None:
    assert parse_partitions(text, 16) == want


NOT_A_RANGE = "is not N or N-M"
OUTSIDE = "is outside 0-15"


@pytest.mark.parametrize(
    ("text", "part", "problem"),
    [
        ("", "", NOT_A_RANGE),
        ("a", "a", NOT_A_RANGE),
        ("1,", "", NOT_A_RANGE),
        (",1", "", NOT_A_RANGE),
        ("-1", "-1", NOT_A_RANGE),
        ("1-", "1-", NOT_A_RANGE),  # was read as "1"
        ("1-2-3", "1-2-3", NOT_A_RANGE),
        ("1.5", "1.5", NOT_A_RANGE),
        ("+1", "+1", NOT_A_RANGE),
        ("1 - 2", "1 - 2", NOT_A_RANGE),
        ("\u0661", "\u0661", NOT_A_RANGE),  # an Arabic-Indic one: a digit, not ASCII
        ("0-\u0661", "0-\u0661", NOT_A_RANGE),  # was read as 0-1
        ("\u00b2", "\u00b2", NOT_A_RANGE),  # superscript two: was int()'s own message
        ("2,16", "16", OUTSIDE),
        ("0-16", "0-16", OUTSIDE),
        ("3-1", "3-1", OUTSIDE),  # a backwards range
    ],
)
def test_bad_input_is_a_value_error_naming_the_part(text: str, part: str,
                                                     problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as info:
        parse_partitions(text, 16)
    assert str(info.value).startswith(repr(part))


def test_a_single_partition_log() -> None:
    assert parse_partitions("0", 1) == [0]
    with pytest.raises(ValueError, match="outside 0-0"):
        parse_partitions("1", 1)


@given(st.integers(1, 64).flatmap(
    lambda total: st.tuples(st.just(total),
                            st.lists(st.tuples(st.integers(0, total - 1),
                                               st.integers(0, total - 1)), min_size=1))))
def test_any_list_of_ranges_is_the_union_of_its_parts(
    case: tuple[int, list[tuple[int, int]]],
) -> None:
    total, parts = case
    ranges = [(min(a, b), max(a, b)) for a, b in parts]
    text = ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)
    want = sorted({p for lo, hi in ranges for p in range(lo, hi + 1)})
    got = parse_partitions(text, total)
    assert got == want
    assert got is not None and all(0 <= p < total for p in got)
