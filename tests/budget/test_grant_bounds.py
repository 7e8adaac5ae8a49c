"""Slice grants of the service at their bounds: one slice per campaign a report
wants, none when there is no room, expiry and billing's watermark at their instants,
and the worst case of a last slice."""

from __future__ import annotations

from datetime import UTC, date, datetime

from adfunnel.budget.protocol import BilledUpdate, CampaignSpend, Report, ReportEntry
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
DAY = "2026-10-20"
T0 = NOW.timestamp()


def _svc(camp: Campaign) -> tuple[BudgetService, ManualClock]:
    clock = ManualClock(NOW)
    svc = BudgetService(clock, warmup_s=0.0)
    svc.upsert_campaign(camp)
    svc.record_billed(BilledUpdate(camp.id, DAY, 0, 0.0))
    svc.handle_report(Report("setup", 0, T0, epoch=svc.epoch))
    return svc, clock


def _cpc(budget: int = 20_000_000) -> Campaign:  # $2 clicks: metered from the start
    return Campaign(1, 1, "c", Objective.CLICKS, BidType.CPC, 2_000_000, budget, "UTC",
                    date(2026, 1, 1))


def _want(svc: BudgetService, server: str, *cids: int, at: float = T0) -> list[int]:
    reply = svc.handle_report(Report(server, 0, at, wants=list(cids)))
    return [g.amount_micros for g in reply.grants]


def test_a_campaign_wanted_twice_in_one_report_gets_one_slice() -> None:
    svc, _ = _svc(_cpc())
    assert _want(svc, "a", 1, 1) == [2_000_000]


def test_no_slice_is_granted_once_half_of_what_remains_is_outstanding() -> None:
    svc, _ = _svc(_cpc())
    # 20 M grantable: at most 10 M outstanding, one charge (2 M) per server at rate 0
    got = [_want(svc, f"s{i}", 1) for i in range(6)]
    assert got == [[2_000_000]] * 5 + [[]]


def test_an_expired_slice_counts_as_spent_from_its_expiry_instant() -> None:
    svc, clock = _svc(_cpc())
    assert _want(svc, "dead", 1) == [2_000_000]  # expires at T0 + 30
    cd = svc.campaign_day(1, date(2026, 10, 20))
    clock.advance(30)  # exactly its expiry: the client no longer uses it
    svc.step()
    assert cd.committed(T0 + 30) == 2_000_000
    # billing complete before the expiry (its close instant) has not covered it
    svc.record_billed(BilledUpdate(1, DAY, 0, T0 + 30))
    assert cd.committed(T0 + 30) == 2_000_000
    svc.record_billed(BilledUpdate(1, DAY, 0, T0 + 30.001))
    assert cd.committed(T0 + 30) == 0


def test_an_expired_slice_leaves_the_outstanding_amount_once() -> None:
    svc, clock = _svc(_cpc())
    assert _want(svc, "dead", 1) == [2_000_000]
    clock.advance(31)
    # 18 M grantable after the expired slice's worst case: at most 9 M outstanding,
    # so four more slices of 2 M, not five
    got = [_want(svc, f"s{i}", 1, at=T0 + 31) for i in range(5)]
    assert got == [[2_000_000]] * 4 + [[]]


def test_a_last_slice_below_one_charge_is_granted_in_the_worst_case() -> None:
    # a CPM bid of $4: a charge of 4_000 µ at most; a daily budget of 3_000 µ
    camp = Campaign(1, 1, "c", Objective.IMPRESSIONS, BidType.CPM, 4_000_000, 3_000, "UTC",
                    date(2026, 1, 1))
    svc, _ = _svc(camp)
    # one impression served at 1_000 µ: the mean price, 1_000, is the last charge
    svc.handle_report(Report("a", 0, T0, [ReportEntry(
        1, T0, [CampaignSpend(1, DAY, 1_000, 0, 4_000, 1)])]))
    reply = svc.handle_report(Report("a", 0, T0, wants=[1]))
    # 2_000 grantable (3_000 - 1_000 in flight) < one charge: a single slice of one
    # charge whose serve takes its worst case
    assert [(g.amount_micros, g.worst_case) for g in reply.grants] == [(4_000, True)]
