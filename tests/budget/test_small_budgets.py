"""Budgets of a few charges pace too (issue 25, *Flight pacing and budget periods*): the
hold band that keeps p from being lowered on billing noise stands for at most a few
percent of such a budget, so p comes down once the campaign is clearly ahead."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.budget.control import HOLD_BAND_CHARGES, HOLD_BAND_MAX_SHARE, hold_band, hold_bands
from adfunnel.pacing.controller import ControllerState, step

USD = 1_000_000


def test_the_hold_band_of_ten_charges_is_a_twentieth_of_the_budget() -> None:
    """$20 of $2 clicks (the day simulation's small-budget campaign): 3 charges would be
    30 % of the budget, ahead of which p could not come down."""
    assert hold_band(0, 2 * USD, 20 * USD) == HOLD_BAND_MAX_SHARE * 20 * USD
    assert hold_band(0, 2 * USD, 200 * USD) == HOLD_BAND_CHARGES * 2 * USD  # 100 charges


@given(spent=st.integers(0, 10**12), charge=st.integers(1, 10**8),
       budget=st.integers(1, 10**13))
def test_hold_bands_are_the_scalar_rule_and_kept_where_three_charges_are_small(
        spent, charge, budget) -> None:
    one = hold_band(spent, charge, budget)
    arr = hold_bands(np.array([spent]), np.array([charge]), np.array([budget]))
    assert arr[0] == one
    if HOLD_BAND_CHARGES * charge <= HOLD_BAND_MAX_SHARE * budget:  # as before issue 25
        sigma3 = 3.0 * (spent * charge) ** 0.5
        assert one == max(HOLD_BAND_CHARGES * charge, min(sigma3, 0.01 * budget))
    assert one <= HOLD_BAND_MAX_SHARE * budget + 1e-6  # never more than 5 % of a budget


def test_a_ten_charge_campaign_a_tenth_ahead_lowers_p() -> None:
    budget, charge = 20 * USD, 2 * USD
    band = hold_band(2 * USD, charge, budget)
    _, p = step(ControllerState(1.0), 40_000, 1_000, 10, budget_micros=budget, charges=1,
                behind_micros=-0.1 * budget, hold_band_micros=band, charge_micros=charge)
    assert p < 1.0
