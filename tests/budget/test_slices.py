"""Slice arithmetic: granted slices never exceed what remains."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adfunnel.budget.slices import BudgetState, budget_state, grantable, open_threshold, slice_size


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
