"""Validation and canonical form of targeting expressions."""

from __future__ import annotations

import json

import pytest

from adfunnel.targeting import All, In, Not, NotIn, TargetingError, dump_expr, parse_expr


def test_parses_nested_tree() -> None:
    expr = parse_expr(
        {"all": [{"attr": "gender", "in": ["F"]}, {"not": {"attr": "os", "not_in": ["ios"]}}]}
    )
    assert expr == All((In("gender", frozenset({"F"})), Not(NotIn("os", frozenset({"ios"})))))


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"attr": "shoe_size", "in": ["42"]}, "targeting.attr"),
        ({"attr": "gender", "equals": ["F"]}, "targeting"),
        ({"attr": "gender", "in": []}, "targeting.in"),
        ({"attr": "gender", "in": [""]}, "targeting.in[0]"),
        ({"all": []}, "targeting.all"),
        ({"all": [{"attr": "gender", "in": ["F"]}], "any": []}, "targeting"),
        ({"xor": [{"attr": "gender", "in": ["F"]}]}, "targeting"),
        ({"any": [{"attr": "gender", "in": [True]}]}, "targeting.any[0].in[0]"),
        ({"attr": "geo.country", "in": [1, 2]}, "targeting.in[0]"),
        ([1, 2], "targeting"),
    ],
)
def test_refuses_bad_trees_naming_the_node(raw: object, path: str) -> None:
    with pytest.raises(TargetingError) as err:
        parse_expr(raw)
    assert err.value.path == path


def test_refuses_implicit_precedence() -> None:
    """A leaf with both 'in' and 'not_in' would need a precedence rule: refused."""
    with pytest.raises(TargetingError):
        parse_expr({"attr": "gender", "in": ["F"], "not_in": ["M"]})


def test_canonical_text_round_trips_byte_identically() -> None:
    raw = {"any": [{"attr": "geo.city", "in": ["Zürich", "42"]},
                   {"not": {"attr": "os", "in": ["ios"]}}]}
    text = dump_expr(raw)
    again = dump_expr(json.loads(text))
    assert text == again
    assert parse_expr(json.loads(text)) == parse_expr(raw)
