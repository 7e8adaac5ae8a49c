"""The pacing controller step and the target curves: pure functions, property-tested."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.pacing.controller import MAX_STEP_CHANGE, P_FLOOR, ControllerState, clamp_step, step
from adfunnel.pacing.curve import TargetPlan, build_curve, curve_for_day

BUDGET = 10_000_000_000


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    p=st.floats(P_FLOOR, 1.0),
    integral=st.floats(-0.05, 0.05),
    spend=st.floats(0, 1e12),
    target=st.floats(0, 1e12),
    dt=st.floats(0.5, 120),
    charges=st.floats(0, 1e4),
    budget=st.integers(1, 10**13),
)
def test_p_stays_in_range_and_moves_at_most_25_percent(p, integral, spend, target, dt, charges,
                                                       budget) -> None:
    state = ControllerState(p, integral)
    new, p2 = step(state, spend, target, dt, budget_micros=budget, charges=charges)
    assert P_FLOOR <= p2 <= 1.0
    assert p * (1 - MAX_STEP_CHANGE) - 1e-12 <= p2 <= p * (1 + MAX_STEP_CHANGE) + 1e-12
    assert abs(new.integral) <= 0.03 + 1e-12


@pytest.mark.slow
@given(st.floats(0, 1), st.floats(0, 10))
def test_clamp_step_range(p_old, p_new) -> None:
    assert P_FLOOR <= clamp_step(p_old, p_new) <= 1.0


def test_converges_to_the_rate_that_matches_the_curve() -> None:
    # plant: spend = p × 5 × target (budget-limited at p* = 0.2)
    state = ControllerState(1.0)
    target = BUDGET / 8640
    for _ in range(200):
        spend = state.p * 5 * target
        state, _ = step(state, spend, target, 10, budget_micros=BUDGET, charges=200)
    assert abs(state.p - 0.2) < 0.02


def test_dead_hour_does_not_drive_p_down() -> None:
    # target ~0 and a few tiny charges: the floored denominator keeps p where it is
    state = ControllerState(0.3)
    for i in range(360):
        spend = 3 * 500_000 if i == 30 else 0
        state, _ = step(state, spend, 10.0, 10, budget_micros=BUDGET, charges=3 if i == 30 else 0)
        assert state.p > 0.2


def test_curve_ends_at_2330_and_is_monotone() -> None:
    hourly = [1.0] * 24
    c = curve_for_day(hourly, date(2026, 10, 20), "Europe/Berlin")
    assert len(c.points) == 1441
    assert c.share_at(23.5 * 3600) == 1.0
    assert 0.49 < c.share_at(11.75 * 3600) < 0.51
    assert all(b >= a for a, b in zip(c.points, c.points[1:], strict=False))


def test_25_hour_day_has_1500_minutes() -> None:
    c = curve_for_day([1.0] * 24, date(2026, 11, 1), "America/New_York")
    assert len(c.points) == 1501
    assert c.end_minute == 1470


def test_budget_edit_rescales_the_rest_of_the_curve() -> None:
    plan = TargetPlan(build_curve([1.0] * 1440), 10_000)
    half = 12 * 3600
    spent = int(plan.target_micros(half))
    raised = plan.rescaled(15_000, half, spent)
    assert raised.target_micros(half) == spent
    assert abs(raised.target_micros(23.5 * 3600) - 15_000) < 1e-6
    cut = plan.rescaled(3_000, half, spent)  # below what is spent: nothing more to spend
    assert cut.target_micros(20 * 3600) == spent


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    p=st.floats(P_FLOOR, 1.0),
    spend=st.floats(0, 1e10),
    target=st.floats(0, 1e10),
    charges=st.floats(0, 100),
    behind=st.floats(-1e9, 1e9),
    band=st.floats(0, 1e8),
)
def test_p_is_never_lowered_while_not_ahead_of_the_curve(p, spend, target, charges, behind,
                                                          band) -> None:
    _, p2 = step(ControllerState(p), spend, target, 10, budget_micros=BUDGET, charges=charges,
                 behind_micros=behind, hold_band_micros=band)
    if behind > -band:
        assert p2 >= p - 1e-15


def test_a_campaign_that_cannot_reach_its_curve_keeps_p_at_1() -> None:
    # plant: spend = p × 0.6 × target with bursts (few charges a step); always behind
    import random

    rnd = random.Random(1)
    state = ControllerState(1.0)
    target = BUDGET / 8640
    behind = 10 * target  # an hour in, already behind (bursts cannot put it ahead)
    for _ in range(2000):
        n = sum(1 for _ in range(8) if rnd.random() < 0.0375 * state.p)
        spend = n * 2 * target
        behind += target - spend
        state, _ = step(state, spend, target, 10, budget_micros=BUDGET, charges=n,
                        behind_micros=behind, hold_band_micros=3 * 2 * target)
        assert state.p == 1.0
