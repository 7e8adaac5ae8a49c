"""The bid multiplier λ's control step: pure, property-tested."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.pacing.bid_multiplier import (
    LAMBDA_MAX,
    MAX_STEP_CHANGE,
    MultiplierArrays,
    MultiplierGains,
    MultiplierState,
    at_bound,
    clamp_lambda,
    clamp_step,
    start_multiplier,
    step,
    step_arrays,
)

BUDGET = 10_000_000_000

lams = st.floats(1.0, LAMBDA_MAX)
spends = st.floats(0, 1e11)
behinds = st.one_of(st.none(), st.floats(-1e11, 1e11))


def _state(lam, integral, spend_avg, target_avg, charges_avg) -> MultiplierState:
    return MultiplierState(lam, integral, spend_avg, target_avg, charges_avg)


states = st.builds(_state, lams, st.floats(-0.03, 0.03), st.floats(-1, 1e10),
                   st.floats(-1, 1e10), st.floats(-1, 1e3))


@settings(max_examples=300, deadline=None)
@given(state=states, spend=spends, target=spends, dt=st.floats(0.5, 120),
       charges=st.floats(0, 1e4), budget=st.integers(1, 10**13), behind=behinds)
def test_lambda_stays_in_bounds_and_moves_at_most_25_percent(state, spend, target, dt, charges,
                                                            budget, behind) -> None:
    """Red when clamp_step clamps only to [1, LAMBDA_MAX], not to ±25 % of the old λ."""
    new, lam = step(state, spend, target, dt, budget_micros=budget, charges=charges,
                    behind_micros=behind)
    assert 1.0 <= lam <= LAMBDA_MAX
    assert new.lam == lam
    lo, hi = state.lam * (1 - MAX_STEP_CHANGE), state.lam * (1 + MAX_STEP_CHANGE)
    assert lo - 1e-9 <= lam <= hi + 1e-9
    assert abs(new.integral) <= 0.03 + 1e-12


@settings(max_examples=300, deadline=None)
@given(state=states, spend=spends, target=spends, charges=st.floats(0, 1e4),
       behind=st.floats(1e-3, 1e11))
def test_ahead_never_lowers_and_behind_never_raises(state, spend, target, charges,
                                                    behind) -> None:
    """Red when either direction rule in step() is removed."""
    _, lam_ahead = step(state, spend, target, 10, budget_micros=BUDGET, charges=charges,
                        behind_micros=-behind)
    assert lam_ahead >= state.lam
    _, lam_behind = step(state, spend, target, 10, budget_micros=BUDGET, charges=charges,
                         behind_micros=behind)
    assert lam_behind <= state.lam


@settings(max_examples=300, deadline=None)
@given(state=states, a=spends, b=spends, target=spends, charges=st.floats(0, 1e4),
       behind=behinds)
def test_lambda_is_monotone_in_spend(state, a, b, target, charges, behind) -> None:
    """More spend in a step never gives a lower λ. Red when the ratio is inverted
    (desired ÷ spend)."""
    lo, hi = min(a, b), max(a, b)
    _, lam_lo = step(state, lo, target, 10, budget_micros=BUDGET, charges=charges,
                     behind_micros=behind)
    _, lam_hi = step(state, hi, target, 10, budget_micros=BUDGET, charges=charges,
                     behind_micros=behind)
    assert lam_hi >= lam_lo * (1 - 1e-12)


def test_spending_ahead_raises_lambda_and_behind_lowers_it() -> None:
    """Red when the spend-rate ratio is inverted."""
    target = BUDGET / 8640
    state = MultiplierState(10.0)
    _, up = step(state, 3 * target, target, 10, budget_micros=BUDGET, charges=50)
    _, down = step(state, target / 3, target, 10, budget_micros=BUDGET, charges=50)
    assert up > 10.0 > down


def test_converges_to_the_multiplier_that_meets_the_plan() -> None:
    """Plant: spend = 40 × target ÷ λ (plan met at λ* = 40). Red when kp = 0."""
    state = MultiplierState(2.0)
    target = BUDGET / 8640
    for _ in range(300):
        spend = 40 * target / state.lam
        state, _ = step(state, spend, target, 10, budget_micros=BUDGET, charges=200)
    assert abs(state.lam - 40) < 4  # the integral still makes up the start's overspend


def test_a_campaign_that_wins_nothing_while_behind_bids_up() -> None:
    """No charges at all (volume 0) but behind plan: λ still falls. Red without the
    idle rule (g = 0 at zero volume)."""
    state = MultiplierState(100.0, charges_avg=0.0)
    target = BUDGET / 8640
    for _ in range(5):
        state, _ = step(state, 0, target, 10, budget_micros=BUDGET, charges=0,
                        behind_micros=5 * target)
    assert state.lam < 100.0 * 0.8


@given(st.floats(0, 20), st.floats(0, 2 * LAMBDA_MAX))
def test_clamp_step_range(old, new) -> None:
    """Red when clamp_step's restart branch skips the clamp."""
    assert 1.0 <= clamp_step(old, new) <= LAMBDA_MAX


@given(st.integers(1, 10**12), st.integers(-10, 10**12))
def test_start_multiplier_bids_the_safe_bid_within_bounds(value, safe) -> None:
    """Red when start_multiplier returns value ÷ safe unclamped."""
    lam = start_multiplier(value, safe)
    assert 1.0 <= lam <= LAMBDA_MAX
    if safe > 0 and value / LAMBDA_MAX <= safe <= value:
        assert abs(value / lam - safe) <= 1e-6 * safe


def test_at_bound_only_at_lambda_max() -> None:
    """Red when at_bound compares with LAMBDA_MIN."""
    assert at_bound(LAMBDA_MAX)
    assert not at_bound(LAMBDA_MAX * 0.999)
    assert not at_bound(1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(states, st.lists(st.tuples(spends, st.integers(0, 3),
                                                     st.floats(-1e10, 1e10)),
                                           min_size=1, max_size=8)),
                min_size=1, max_size=6),
       st.floats(0.1, 2.0), st.floats(0.01, 5.0))
def test_array_steps_equal_scalar_steps_bit_for_bit(lanes, kp, volume_ref) -> None:
    """Several steps of several lanes (each its own gain) through step_arrays and through
    step: identical floats. Red when step_arrays' direction rules are swapped."""
    steps = min(len(inputs) for _, inputs in lanes)
    gains = [MultiplierGains(kp=kp * (i + 1), volume_ref=volume_ref) for i in range(len(lanes))]
    arr = MultiplierArrays(*(np.array([getattr(s, f) for s, _ in lanes])
                             for f in MultiplierState.__slots__))
    vector_gains = MultiplierGains(kp=np.array([g.kp for g in gains]),  # type: ignore[arg-type]
                                   volume_ref=volume_ref)
    scalar = [s for s, _ in lanes]
    target = BUDGET / 8640
    for t in range(steps):
        spend = np.array([inputs[t][0] for _, inputs in lanes])
        charges = np.array([inputs[t][1] for _, inputs in lanes])
        behind = np.array([inputs[t][2] for _, inputs in lanes])
        arr = step_arrays(arr, spend, np.full(len(lanes), target), 10.0,
                          budget_micros=np.full(len(lanes), BUDGET), charges=charges,
                          behind_micros=behind, gains=vector_gains)
        scalar = [step(s, spend[i], target, 10.0, budget_micros=BUDGET, charges=charges[i],
                       behind_micros=behind[i], gains=gains[i])[0]
                  for i, s in enumerate(scalar)]
        for f in MultiplierState.__slots__:
            assert getattr(arr, f).tolist() == [getattr(s, f) for s in scalar], f


def test_on_plan_no_direction_rule_applies() -> None:
    """behind_micros == 0 is neither ahead nor behind: spending half the target lowers λ
    as with no plan at all. Red when "ahead" is taken as behind <= 0."""
    state = MultiplierState(100.0, 0.0, BUDGET / 8640, BUDGET / 8640, 10.0)
    target = BUDGET / 8640
    on_plan, lam = step(state, target / 2, target, 10, budget_micros=BUDGET, charges=10,
                        behind_micros=0.0)
    assert lam < 100.0
    assert on_plan == step(state, target / 2, target, 10, budget_micros=BUDGET, charges=10)[0]
    arr = step_arrays(MultiplierArrays(*(np.array([getattr(state, f)])
                                         for f in MultiplierState.__slots__)),
                      np.array([target / 2]), np.array([target]), 10.0,
                      budget_micros=np.array([BUDGET]), charges=np.array([10.0]),
                      behind_micros=np.array([0.0]))
    assert arr.lam.tolist() == [lam]


def test_one_charge_due_per_step_and_none_won_takes_the_idle_gain() -> None:
    """charges_avg exactly 1 (one charge due per step), nothing won: g = kp × idle_share
    = 0.3, and ratio = floor ÷ desired ≈ 277_778 ÷ 1_167_052 ≈ 0.238, so λ × 0.238^0.3
    ≈ 0.65 λ, cut to the 25 % step limit: 75. Red when the rule needs more than one."""
    target = BUDGET / 8640
    state = MultiplierState(100.0, 0.0, 0.0, target, 1.0)
    _, lam = step(state, 0, target, 10, budget_micros=BUDGET, charges=0)
    assert lam == 75.0


def test_a_corrupt_nan_multiplier_restarts_at_one() -> None:
    """NaN → LAMBDA_MIN, in clamp_lambda and in both steps."""
    assert clamp_lambda(float("nan")) == 1.0
    nan = MultiplierState(float("nan"), 0.0, 1e6, 1e6, 10.0)
    assert step(nan, 1e6, 1e6, 10, budget_micros=BUDGET, charges=10)[1] == 1.0
    arr = step_arrays(MultiplierArrays(*(np.array([getattr(nan, f)])
                                         for f in MultiplierState.__slots__)),
                      np.array([1e6]), np.array([1e6]), 10.0, budget_micros=np.array([BUDGET]),
                      charges=np.array([10.0]), behind_micros=np.array([0.0]))
    assert arr.lam.tolist() == [1.0]
