"""Lifetime budgets in the spend gates (issue 7 §10): remaining = min(daily remaining,
lifetime remaining), under the same open / metered / slice rules."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

from adfunnel.budget.day_rows import day_budget
from adfunnel.budget.gate import (
    BUDGET_EXHAUSTED,
    LocalSpendGate,
    Served,
    effective_daily_budget,
)
from adfunnel.budget.protocol import BilledUpdate, Report
from adfunnel.budget.service import BudgetService
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
DAY = NOW.date()
CHARGE = 2_000  # CPM 2,000,000 µ: 2,000 µ per impression


def _camp(lifetime: int | None = 10_000, daily: int = 100_000) -> Campaign:
    return Campaign(1, 1, "c", Objective.IMPRESSIONS, BidType.CPM, 2_000_000, daily, "UTC",
                    date(2026, 1, 1), lifetime_budget_micros=lifetime)


def test_effective_budget_is_the_lower_of_daily_and_lifetime_left() -> None:
    assert effective_daily_budget(100_000, None, 50_000) == 100_000
    assert effective_daily_budget(100_000, 10_000, 0) == 10_000
    assert effective_daily_budget(100_000, 10_000, 4_000) == 6_000
    assert effective_daily_budget(100_000, 10_000, 12_000) == 0
    assert effective_daily_budget(3_000, 10_000, 4_000) == 3_000


def _serve_and_bill(gate: LocalSpendGate, c: Campaign, at: datetime, n: int) -> int:
    """Admit-serve-bill up to ``n`` impressions; how many were admitted."""
    admitted = 0
    for k in range(n):
        if gate.admit(c, at, CHARGE) is not None:
            break
        imp = f"{at.date()}-{k}"
        gate.record_served(Served(c.id, at.date(), imp, CHARGE, at.timestamp() + 3600, CHARGE))
        gate.record_billed(c.id, at.date(), CHARGE, imp, True)
        admitted += 1
    return admitted


def test_local_gate_stops_at_the_lifetime_budget_across_days() -> None:
    """The issue's input: lifetime 10,000 µ, daily 100,000 µ, 2,000 µ per impression
    over three days: 5 impressions in all (10,000 µ), not 60,000 µ."""
    gate, c = LocalSpendGate(), _camp()
    served = [_serve_and_bill(gate, c, NOW + timedelta(days=d), 10) for d in range(3)]
    assert served == [5, 0, 0]
    assert gate.admit(c, NOW + timedelta(days=3), CHARGE) == BUDGET_EXHAUSTED
    # a raised lifetime budget opens again, counting what was billed before today
    assert _serve_and_bill(gate, replace(c, lifetime_budget_micros=14_000),
                           NOW + timedelta(days=3), 10) == 2


def test_local_gate_counts_outstanding_cost_against_the_lifetime_budget() -> None:
    gate, c = LocalSpendGate(), _camp(lifetime=5_000)
    gate.seed_lifetime({1: 1_000})  # billed yesterday (restart recovery)
    for k in range(2):
        assert gate.admit(c, NOW, CHARGE) is None
        gate.record_served(Served(1, DAY, f"i{k}", CHARGE, NOW.timestamp() + 3600, CHARGE))
    assert gate.admit(c, NOW, CHARGE) == BUDGET_EXHAUSTED  # 1,000 + 4,000 + 2,000 > 5,000


def test_no_lifetime_budget_keeps_the_daily_rule() -> None:
    gate, c = LocalSpendGate(), _camp(lifetime=None, daily=10_000)
    assert [_serve_and_bill(gate, c, NOW + timedelta(days=d), 10) for d in range(2)] == [5, 5]


def _svc(c: Campaign) -> BudgetService:
    svc = BudgetService(ManualClock(NOW), warmup_s=0.0)
    svc.upsert_campaign(c)
    svc.record_billed(BilledUpdate(c.id, DAY.isoformat(), 0, 0.0))
    svc.handle_report(Report("setup", 0, NOW.timestamp(), epoch=svc.epoch))
    return svc


def test_service_uses_the_lifetime_budget_left_from_earlier_days() -> None:
    svc = _svc(_camp())
    cd = svc.current(1, NOW.timestamp())
    assert day_budget(cd) == 10_000
    svc.record_billed(BilledUpdate(1, DAY.isoformat(), 0, NOW.timestamp(),
                                   lifetime_billed_before_micros=4_000))
    assert day_budget(cd) == 6_000
    assert cd.state is not BudgetState.STOPPED
    svc.record_billed(BilledUpdate(1, DAY.isoformat(), 0, NOW.timestamp() + 1,
                                   lifetime_billed_before_micros=10_000))
    assert day_budget(cd) == 0
    assert cd.state is BudgetState.STOPPED
    assert [d.p for d in svc.directives(NOW.timestamp())] == [0.0]
