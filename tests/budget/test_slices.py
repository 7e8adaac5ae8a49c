"""Slice arithmetic: granted slices never exceed what remains."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.budget.slices import (
    BudgetState,
    budget_state,
    grantable,
    last_charge,
    last_charges,
    open_threshold,
    slice_size,
    worst_case_regime,
)


@given(rate=st.floats(0, 1e9), charge=st.integers(1, 10**8), grant=st.integers(0, 10**11),
       outstanding=st.integers(0, 10**11))
def test_grants_never_exceed_what_remains(rate, charge, grant, outstanding) -> None:
    s = slice_size(rate, charge, grant, outstanding)
    assert s == 0 or s >= charge
    if s:
        assert outstanding + s <= grant
        assert outstanding == 0 or outstanding + s <= grant // 2


@given(st.integers(0, 10**10), st.integers(0, 10**10), st.integers(0, 10**10))
def test_grantable_is_never_negative(b, billed, fl) -> None:
    assert 0 <= grantable(b, billed, fl) <= b


def test_no_grant_below_one_charge() -> None:
    assert slice_size(1e6, 2_000_000, 1_999_999, 0) == 0
    assert slice_size(1e6, 2_000_000, 2_000_000, 0) == 2_000_000


def test_states() -> None:
    thr = open_threshold(1000.0, 2_000_000)
    assert thr == 20_000_000  # 10 charges > 5 min of 1000 micros/s
    assert budget_state(thr + 1, thr, thr, 2_000_000) is BudgetState.OPEN
    assert budget_state(thr, thr, thr, 2_000_000) is BudgetState.METERED
    assert budget_state(thr, 1_999_999, thr, 2_000_000) is BudgetState.EXHAUSTED


@given(rate=st.floats(0, 1e9), charge=st.integers(1, 10**8), grant=st.integers(0, 10**11),
       outstanding=st.integers(0, 10**11), last=st.integers(1, 10**8))
def test_a_last_slice_is_granted_alone_and_exceeds_what_remains_by_less_than_a_charge(
        rate, charge, grant, outstanding, last) -> None:
    s = slice_size(rate, charge, grant, outstanding, last)
    assert s == 0 or s >= charge
    if s and grant < charge:  # a last slice: its serve takes its worst case
        assert outstanding == 0 and s == charge and grant >= last
        assert s - grant < charge and worst_case_regime(grant, charge)
    elif s:
        assert outstanding + s <= grant
    assert (s > 0) == (slice_size(rate, charge, grant, outstanding) > 0 or (
        outstanding == 0 and last <= grant < charge))


def test_the_last_charge_is_the_mean_charge_only_where_it_is_exact() -> None:
    assert last_charge(4_000, True, 10_001, 10) == 1_001  # CPM: the mean price, rounded up
    assert last_charge(4_000, True, 50_000, 10) == 4_000  # never above the bid
    assert last_charge(4_000, True, 0, 0) == 4_000  # nothing served yet: the bid
    assert last_charge(2_000_000, False, 1_000_000, 10) == 2_000_000  # CPC: the bid
    got = last_charges(np.array([4_000, 4_000, 4_000, 2_000_000]),
                       np.array([True, True, True, False]), np.array([10_001, 50_000, 0, 10**6]),
                       np.array([10, 10, 0, 10]))
    assert got.tolist() == [1_001, 4_000, 4_000, 2_000_000]
    assert budget_state(0, 1_500, 10_000, 4_000, 1_001) is BudgetState.METERED
    assert budget_state(0, 1_000, 10_000, 4_000, 1_001) is BudgetState.EXHAUSTED


def test_one_charge_left_is_still_metered_and_not_the_worst_case() -> None:
    # exactly one charge grantable: slice_size grants it, so the state is not EXHAUSTED
    assert budget_state(0, 2_000_000, 20_000_000, 2_000_000) is BudgetState.METERED
    assert budget_state(0, 1_001, 10_000, 4_000, 1_001) is BudgetState.METERED
    # "below" WORST_CASE_CHARGES (1) charges: one whole charge left is not the worst case
    assert not worst_case_regime(2_000_000, 2_000_000)
    assert worst_case_regime(1_999_999, 2_000_000)


def test_a_slice_is_ten_seconds_of_spend_within_half_of_what_remains() -> None:
    # 1000 micros/s for 10 s = 10_000, far below half of 10**9
    assert slice_size(1000.0, 2_000, 10**9, 0) == 10_000
    # 10 charges grantable, 4 outstanding: room = 5 - 4 = exactly one charge
    assert slice_size(1e9, 2_000, 20_000, 8_000) == 2_000
    # a last slice where exactly the last charge remains (below one charge)
    assert slice_size(0.0, 4_000, 1_001, 0, 1_001) == 4_000
    assert slice_size(0.0, 4_000, 1_000, 0, 1_001) == 0
