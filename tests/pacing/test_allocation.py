"""High Water Mark (pacing/allocation.py): the paper's invariants as properties, and the
nested-targeting case the issue names (a narrow line inside a broad one)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.pacing.allocation import (
    contention_order,
    high_water_mark,
    seed_pacing_rates,
    water_level,
)

LINES = st.integers(1, 6)
NODES = st.lists(st.tuples(st.frozensets(LINES, min_size=1, max_size=4),
                           st.floats(0, 1000, allow_nan=False)), min_size=1, max_size=12)
DEMAND = st.dictionaries(LINES, st.floats(0, 3000, allow_nan=False), min_size=1)
EPS = 1e-6


@settings(max_examples=300, deadline=None)
@given(NODES, DEMAND)
def test_never_more_than_the_supply_of_a_request_type_nor_the_demand(nodes, demand) -> None:
    plan = high_water_mark(nodes, demand)
    kept = [(ids, w) for ids, w in nodes if w > 0]
    assert len(plan.taken) == len(kept)
    for (ids, w), takes in zip(kept, plan.taken, strict=True):
        assert sum(takes.values()) <= w * (1 + EPS) + EPS
        assert set(takes) <= set(ids)  # only lines eligible for it take from it
    for j, d in demand.items():
        assert plan.allocated[j] <= d * (1 + EPS) + EPS
        assert math.isclose(plan.allocated[j], sum(t.get(j, 0.0) for t in plan.taken),
                            rel_tol=1e-9, abs_tol=1e-9)
        assert 0.0 <= plan.alpha[j] <= 1.0
        assert 0.0 <= plan.p[j] <= 1.0


@settings(max_examples=300, deadline=None)
@given(NODES, DEMAND)
def test_a_line_short_of_its_demand_took_all_that_was_left(nodes, demand) -> None:
    """alpha < 1 means the demand was met exactly; a line falls short only at alpha 1
    (or with no eligible supply at all: alpha 0)."""
    plan = high_water_mark(nodes, demand)
    for j, d in demand.items():
        if plan.alpha[j] < 1.0 and plan.eligible[j] > 0:
            assert math.isclose(plan.allocated[j], d, rel_tol=1e-6, abs_tol=1e-6)


@settings(max_examples=200, deadline=None)
@given(NODES, DEMAND)
def test_order_is_by_eligible_supply_then_id_and_deterministic(nodes, demand) -> None:
    a, b = high_water_mark(nodes, demand), high_water_mark(list(reversed(nodes)), demand)
    assert a.order == b.order == tuple(contention_order(a.eligible))
    keys = [(a.eligible[j], j) for j in a.order]
    assert keys == sorted(keys)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 1000), st.integers(0, 1000), st.floats(0, 1), st.floats(0, 1))
def test_a_narrow_line_nested_in_a_broad_one_is_fully_served_when_demand_fits(
        narrow_supply, broad_only, f_narrow, f_broad) -> None:
    """Narrow N ⊂ broad B: N's requests are eligible to both, B also has its own. Any
    demands that fit (d_N ≤ N's supply, d_N + d_B ≤ all) are both met in full."""
    d_n = f_narrow * narrow_supply
    d_b = f_broad * (narrow_supply + broad_only - d_n)
    nodes = [(frozenset({1, 2}), narrow_supply), (frozenset({1}), broad_only)]
    plan = high_water_mark(nodes, {1: d_b, 2: d_n})  # 1 is broad, 2 narrow
    assert plan.order[0] == 2 or broad_only == 0
    assert math.isclose(plan.allocated[2], d_n, rel_tol=1e-6, abs_tol=1e-6)
    assert math.isclose(plan.allocated[1], d_b, rel_tol=1e-6, abs_tol=1e-6)


def test_the_narrow_line_claims_its_scarce_supply_first() -> None:
    """News readers (100) are eligible to both lines; everyone else (900) only to the run-
    of-site line. Served broad-first at an even fraction, the broad line would take 80 %
    of the news readers and the news line would get 20 of its 60."""
    nodes = [(frozenset({"ros", "news"}), 100.0), (frozenset({"ros"}), 900.0)]
    plan = high_water_mark(nodes, {"ros": 800.0, "news": 60.0})
    assert plan.order == ("news", "ros")
    assert plan.allocated == {"news": 60.0, "ros": 800.0}
    assert plan.alpha["news"] == 0.6
    # the broad line takes the same fraction of each type where it can: 40 left of the
    # news readers is below that fraction's share, so it takes all 40 and 760 elsewhere
    assert math.isclose(plan.alpha["ros"], 760 / 900)
    assert plan.taken[0] == {"news": 60.0, "ros": 40.0}
    # serve probabilities: the news line takes 60 of the 100 it sees, the broad line
    # 800 of the 940 the news line leaves
    assert plan.p["news"] == 0.6 and math.isclose(plan.p["ros"], 800 / 940)
    assert seed_pacing_rates(plan) == plan.p


def test_a_goal_the_supply_cannot_meet_takes_everything_left() -> None:
    plan = high_water_mark([(frozenset({1}), 50.0)], {1: 80.0})
    assert plan.alpha[1] == 1.0 and plan.allocated[1] == 50.0


def test_water_level_is_exact_on_its_breakpoints() -> None:
    # left 10 of 100 and 100 of 100: alpha 0.5 takes 10 + 50 = 60
    assert water_level([(10.0, 100.0), (100.0, 100.0)], 60.0) == 0.5
    assert water_level([(10.0, 100.0), (100.0, 100.0)], 0.0) == 0.0
    assert water_level([(10.0, 100.0)], 11.0) == 1.0
