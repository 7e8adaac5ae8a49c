"""Hypothesis strategies shared by the targeting, DNF and index tests."""

from __future__ import annotations

from hypothesis import strategies as st

from adfunnel.targeting import All, Any_, In, Not, NotIn


def value_sets(values: list[str], min_size: int = 1) -> st.SearchStrategy[frozenset[str]]:
    return st.frozensets(st.sampled_from(values), min_size=min_size, max_size=3)


def trees(
    attrs: list[str], values: list[str], *, max_all: int = 3, max_leaves: int = 10
) -> st.SearchStrategy:
    """Random targeting expressions over ``attrs`` × ``values`` (all/any/not, in/not_in)."""
    leaf = st.one_of(
        st.builds(In, st.sampled_from(attrs), value_sets(values)),
        st.builds(NotIn, st.sampled_from(attrs), value_sets(values)),
    )
    return st.recursive(
        leaf,
        lambda ch: st.one_of(
            st.builds(All, st.lists(ch, min_size=1, max_size=max_all).map(tuple)),
            st.builds(Any_, st.lists(ch, min_size=1, max_size=3).map(tuple)),
            st.builds(Not, ch),
        ),
        max_leaves=max_leaves,
    )


def requests(attrs: list[str], values: list[str], min_size: int = 0) -> st.SearchStrategy:
    """Random requests: attribute -> set of values (possibly several, possibly none)."""
    return st.dictionaries(st.sampled_from(attrs), value_sets(values, min_size=min_size))
