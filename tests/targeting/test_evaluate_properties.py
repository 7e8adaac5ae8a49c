"""Algebraic laws of the evaluator on generated trees (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.targeting import In, Not, NotIn, matches
from tests.strategies import requests, trees, value_sets

ATTRS = ["gender", "os", "interests"]
VALUES = ["a", "b", "c"]
values = value_sets(VALUES)
tree = trees(ATTRS, VALUES, max_leaves=8)
request = requests(ATTRS, VALUES, min_size=1)


@pytest.mark.slow
@settings(max_examples=300)
@given(tree, request)
def test_not_inverts(expr, req) -> None:
    assert matches(Not(expr), req) is (not matches(expr, req))


@pytest.mark.slow
@settings(max_examples=300)
@given(st.sampled_from(ATTRS), values, request)
def test_not_in_is_not_of_in(attr: str, vals: frozenset[str], req) -> None:
    assert matches(NotIn(attr, vals), req) is matches(Not(In(attr, vals)), req)
