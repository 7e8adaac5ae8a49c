"""compile_dnf: equivalence with the evaluator, NOT push-down, merges and the blow-up guard."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.targeting import All, Any_, In, Not, NotIn, TargetingError, matches, parse_expr
from adfunnel.targeting.dnf import MAX_CONJUNCTIONS, Conjunction, Term, compile_dnf
from tests.strategies import requests as request_strategy
from tests.strategies import trees

ATTRS = ["geo.country", "geo.region", "gender", "interests", "age_band"]
VALUES = ["a", "b", "c", "d"]

exprs = trees(ATTRS, VALUES)
requests = request_strategy(ATTRS, VALUES)


def _eval(conjs: list[Conjunction], request: dict[str, frozenset[str]]) -> bool:
    return any(c.matches(request) for c in conjs)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(exprs, st.lists(requests, min_size=1, max_size=8))
def test_dnf_equals_evaluator(expr, reqs) -> None:
    try:
        conjs = compile_dnf(expr)
    except TargetingError:
        return
    assert len(conjs) <= MAX_CONJUNCTIONS
    for request in reqs:
        assert _eval(conjs, request) == matches(expr, request)


def test_not_is_pushed_down_with_de_morgan() -> None:
    expr = Not(All((In("gender", frozenset({"F"})), NotIn("age_band", frozenset({"1"})))))
    assert compile_dnf(expr) == [
        Conjunction((Term("age_band", frozenset({"1"})),)),
        Conjunction((Term("gender", frozenset({"F"}), negated=True),)),
    ]


def test_missing_attribute_semantics() -> None:
    (c_in,) = compile_dnf(In("gender", frozenset({"F"})))
    (c_not,) = compile_dnf(NotIn("gender", frozenset({"F"})))
    assert not c_in.matches({}) and c_not.matches({})
    assert c_in.size == 1 and c_not.size == 0


def test_same_attribute_merges() -> None:
    a = frozenset({"x", "y"})
    # not_in ∧ not_in -> one not_in over the union
    (c,) = compile_dnf(All((NotIn("os", frozenset({"x"})), NotIn("os", frozenset({"y"})))))
    assert c.terms == (Term("os", a, negated=True),)
    # in ∨ in -> one in over the union
    (c,) = compile_dnf(Any_((In("os", frozenset({"x"})), In("os", frozenset({"y"})))))
    assert c.terms == (Term("os", a),)
    # in S ∧ not_in T -> in (S - T) ∧ not_in T; unsatisfiable when S ⊆ T
    (c,) = compile_dnf(All((In("os", a), NotIn("os", frozenset({"y"})))))
    assert c.terms == (Term("os", frozenset({"x"})), Term("os", frozenset({"y"}), negated=True))
    assert compile_dnf(All((In("os", frozenset({"x"})), NotIn("os", a)))) == []
    # nested in-sets: the wider one is implied
    (c,) = compile_dnf(All((In("os", frozenset({"x"})), In("os", a))))
    assert c.terms == (Term("os", frozenset({"x"})),)
    # overlapping in-sets on a multi-valued attribute stay two terms (not an intersection)
    both = All((In("interests", a), In("interests", frozenset({"y", "z"}))))
    (c,) = compile_dnf(both)
    assert c.size == 2
    assert matches(both, {"interests": frozenset({"x", "z"})})


def test_absorption() -> None:
    x = In("gender", frozenset({"F"}))
    y = In("age_band", frozenset({"2"}))
    assert compile_dnf(Any_((x, All((x, y))))) == compile_dnf(x)


def test_blow_up_is_refused_with_a_path() -> None:
    # all of 7 two-way ORs over distinct attributes: 2**7 = 128 conjunctions
    attrs = sorted(["geo.country", "geo.region", "geo.city", "gender", "os", "browser", "domain"])
    raw = {
        "all": [{"any": [{"attr": a, "in": ["1"]}, {"attr": "age_band", "in": [a]}]} for a in attrs]
    }
    # disjoint age_band 'in' sets are not intersected (multi-valued safe), so all 128 remain
    with pytest.raises(TargetingError) as err:
        compile_dnf(parse_expr(raw))
    assert err.value.path == "targeting"
    assert str(MAX_CONJUNCTIONS) in err.value.problem


def test_blow_up_path_names_the_inner_node() -> None:
    inner = {
        "all": [
            {"any": [{"attr": "os", "in": [str(i)]}, {"attr": "browser", "in": [str(i)]}]}
            for i in range(7)
        ]
    }
    raw = {"any": [{"attr": "gender", "in": ["F"]}, inner]}
    with pytest.raises(TargetingError) as err:
        compile_dnf(parse_expr(raw))
    assert err.value.path == "targeting.any[1]"


def test_just_under_the_limit_is_accepted() -> None:
    raw = {
        "all": [
            {"any": [{"attr": "os", "in": [str(i)]}, {"attr": "browser", "in": [str(i)]}]}
            for i in range(6)
        ]
    }
    assert len(compile_dnf(parse_expr(raw))) == 64
