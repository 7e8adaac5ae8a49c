"""Algebraic laws of the evaluator on generated trees (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.targeting import All, Any_, In, Not, NotIn, matches

ATTRS = ["gender", "os", "interests"]
VALUES = ["a", "b", "c"]
values = st.frozensets(st.sampled_from(VALUES), min_size=1)
leaf = st.one_of(
    st.builds(In, st.sampled_from(ATTRS), values), st.builds(NotIn, st.sampled_from(ATTRS), values)
)
tree = st.recursive(
    leaf,
    lambda kids: st.one_of(
        st.builds(lambda c: All(tuple(c)), st.lists(kids, min_size=1, max_size=3)),
        st.builds(lambda c: Any_(tuple(c)), st.lists(kids, min_size=1, max_size=3)),
        st.builds(Not, kids),
    ),
    max_leaves=8,
)
request = st.dictionaries(st.sampled_from(ATTRS), values)


@settings(max_examples=300)
@given(tree, request)
def test_not_inverts(expr, req) -> None:
    assert matches(Not(expr), req) is (not matches(expr, req))


@settings(max_examples=300)
@given(st.sampled_from(ATTRS), values, request)
def test_not_in_is_not_of_in(attr: str, vals: frozenset[str], req) -> None:
    assert matches(NotIn(attr, vals), req) is matches(Not(In(attr, vals)), req)
