"""The service's report/reply protocol: duplicates, out-of-order sequence numbers,
billed spend, metering and slices, and the client's fail-closed behaviour."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import pytest

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import Served
from adfunnel.budget.protocol import (
    BilledUpdate,
    CampaignSpend,
    Reply,
    Report,
    ReportEntry,
)
from adfunnel.budget.service import BudgetService
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
DAY = "2026-10-20"


def _camp(budget: int = 100_000_000, cid: int = 1, bid: int = 2_000_000) -> Campaign:
    return Campaign(cid, 1, "c", Objective.CLICKS, BidType.CPC, bid, budget, "UTC",
                    date(2026, 1, 1))


def _svc(*camps: Campaign) -> tuple[BudgetService, ManualClock]:
    """A warm service: today's billed spend read (0) and its one prior server synced."""
    clock = ManualClock(NOW)
    svc = BudgetService(clock, warmup_s=0.0)
    for c in camps or (_camp(),):
        svc.upsert_campaign(c)
        svc.record_billed(BilledUpdate(c.id, DAY, 0, 0.0))
    svc.handle_report(Report("setup", 0, NOW.timestamp(), epoch=svc.epoch))
    assert svc.warm()
    return svc, clock


def _entry(seq: int, micros: int, cid: int = 1) -> ReportEntry:
    return ReportEntry(seq, NOW.timestamp(), [CampaignSpend(cid, DAY, micros, 0, micros, 1)])


def _spent(svc: BudgetService) -> int:
    return svc.campaign_day(1, date(2026, 10, 20)).served_total


def test_duplicate_entries_count_once() -> None:
    svc, _ = _svc()
    r1 = svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(1, 100)]))
    r2 = svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(1, 100)]))
    assert r1 == r2 and r1.acked_through == 1
    svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(1, 100), _entry(2, 50)]))
    assert _spent(svc) == 150


def test_out_of_order_entries_apply_once_each() -> None:
    svc, _ = _svc()
    svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(3, 30)]))
    svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(2, 20)]))
    svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(1, 10), _entry(2, 20)]))
    svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(3, 30)]))
    assert _spent(svc) == 60
    # another server's seq numbers are its own
    svc.handle_report(Report("b", 0, NOW.timestamp(), [_entry(1, 5)]))
    assert _spent(svc) == 65


def test_reply_carries_state_and_p() -> None:
    svc, clock = _svc()
    reply = svc.handle_report(Report("a", 0, NOW.timestamp()))
    # no control step has measured a spend rate yet: unknown rate, so metered
    assert [(d.campaign_id, d.state, d.p) for d in reply.directives] == [(1, "metered", 1.0)]
    svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(1, 1000)]))
    clock.advance(10)
    svc.step()
    reply = svc.handle_report(Report("a", 0, clock.now().timestamp()))
    assert [(d.campaign_id, d.state) for d in reply.directives] == [(1, "open")]


def test_unknown_rate_burst_cannot_overspend() -> None:
    """A campaign whose servers have not reported yet is metered: the first burst is
    bounded by slices, however fast it is."""
    camp = _camp()
    svc, clock = _svc(camp)
    c = BudgetClient("s", clock, _Direct(svc))
    c.report()
    assert c.admit(camp, clock.now(), 2_000_000) == "no_slice"


def test_billed_spend_replaces_estimates_before_the_watermark() -> None:
    svc, _ = _svc()
    svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(1, 1000)]))
    cd = svc.campaign_day(1, date(2026, 10, 20))
    assert cd.committed(NOW.timestamp()) == 1000
    svc.record_billed(BilledUpdate(1, DAY, 700, NOW.timestamp() + 1))
    assert cd.committed(NOW.timestamp()) == 700
    svc.record_billed(BilledUpdate(1, DAY, 600, NOW.timestamp()))  # stale: ignored
    assert cd.committed(NOW.timestamp()) == 700


class _Direct:
    """In-memory transport straight into one service."""

    def __init__(self, svc: BudgetService) -> None:
        self.svc = svc
        self.up = True

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        if self.up:
            on_reply(self.svc.handle_report(report))


def test_metered_campaign_spends_only_from_slices_and_never_over_budget() -> None:
    camp = _camp(budget=20_000_000)  # $20 with $2 clicks: metered from the start
    svc, clock = _svc(camp)
    net = _Direct(svc)
    clients = [BudgetClient(f"s{i}", clock, net) for i in range(3)]
    granted_total = 0
    for c in clients:
        c.report()
        assert c.admit(camp, clock.now(), 2_000_000) == "no_slice"
        c.report()
        granted_total += sum(s.amount for s in c.held_slices())
    assert 0 < granted_total <= 20_000_000 // 2 + 2_000_000
    cd = svc.campaign_day(1, date(2026, 10, 20))
    assert cd.state.value == "metered"
    c = clients[0]
    held = sum(s.amount for s in c.held_slices())
    assert held > 0  # the first server to ask was granted a slice
    admitted = 0
    while c.admit(camp, clock.now(), 2_000_000) is None and admitted < 100:
        c.record_served(Served(1, date(2026, 10, 20), f"i{admitted}", 2_000_000, 0.0, 2_000_000))
        admitted += 1
    # metered: it serves only from its slices ($2 a serve), never beyond them
    assert 0 < admitted * 2_000_000 <= held


def test_client_fails_closed_after_60_s_without_replies() -> None:
    camp = _camp()
    svc, clock = _svc(camp)
    net = _Direct(svc)
    c = BudgetClient("s", clock, net)
    c.report()
    c.admit(camp, clock.now(), 2_000_000)  # metered until the rate is measured: a slice
    c.report()
    svc.handle_report(Report("t", 0, clock.now().timestamp(), [_entry(1, 1000)]))
    clock.advance(10)
    svc.step()  # a measured rate, far below the budget: open
    c.report()
    assert c.state(1, NOW.date()) is BudgetState.OPEN
    assert c.admit(camp, clock.now(), 2_000_000) is None
    net.up = False
    clock.advance(59)
    c.report()
    assert c.admit(camp, clock.now(), 2_000_000) is None  # open campaigns keep serving
    clock.advance(2)
    c.report()
    assert c.admit(camp, clock.now(), 2_000_000) == "no_slice"  # metered now, no slice
    net.up = True
    c.report()
    assert c.admit(camp, clock.now(), 2_000_000) is None


def test_unacked_entries_are_resent_and_counted_once() -> None:
    camp = _camp()
    svc, clock = _svc(camp)
    net = _Direct(svc)
    c = BudgetClient("s", clock, net)
    c.report()
    net.up = False
    for i in range(3):
        c.record_served(Served(1, date(2026, 10, 20), f"i{i}", 1000, 0.0, 2_000_000))
        clock.advance(1)
        c.report()
    net.up = True
    c.report()
    c.report()
    assert _spent(svc) == 3000


def test_crashed_servers_slices_count_as_spent_until_billing_passes() -> None:
    camp = _camp(budget=20_000_000)
    svc, clock = _svc(camp)
    net = _Direct(svc)
    c = BudgetClient("dead", clock, net)
    c.report()
    c.admit(camp, clock.now(), 2_000_000)
    c.report()
    held = sum(s.amount for s in c.held_slices())
    assert held > 0
    cd = svc.campaign_day(1, date(2026, 10, 20))
    clock.advance(31)  # the server never reports again: its slices expire
    svc.step()
    assert cd.committed(clock.now().timestamp()) == held
    svc.record_billed(BilledUpdate(1, DAY, 0, (clock.now() + timedelta(seconds=1)).timestamp()))
    assert cd.committed(clock.now().timestamp()) == 0


def test_already_billed_events_of_serves_in_flight_are_not_counted_twice() -> None:
    svc, _ = _svc()
    svc.handle_report(Report("a", 0, NOW.timestamp(), [_entry(1, 1000)]))
    cd = svc.campaign_day(1, date(2026, 10, 20))
    # a click of 400 from that serve is billed; the serve is still inside the window
    svc.record_billed(BilledUpdate(1, DAY, 400, NOW.timestamp() - 1, 400))
    assert cd.committed(NOW.timestamp()) == 400 + (1000 - 400)
    # more billed than expected: in flight never goes below 0
    svc.record_billed(BilledUpdate(1, DAY, 1500, NOW.timestamp() - 1, 1500))
    assert cd.committed(NOW.timestamp()) == 1500


def test_a_late_close_replaces_the_worst_case_assumed_at_expiry() -> None:
    camp = _camp(budget=20_000_000)
    svc, clock = _svc(camp)
    net = _Direct(svc)
    c = BudgetClient("late", clock, net)
    c.report()
    c.admit(camp, clock.now(), 2_000_000)
    c.report()
    held = c.held_slices()
    assert held
    c.record_served(Served(1, date(2026, 10, 20), "i", 100_000, 0.0, 2_000_000))
    cd = svc.campaign_day(1, date(2026, 10, 20))
    clock.advance(31)
    svc.step()  # the service expires the slices first: worst case
    assert cd.in_flight() >= sum(s.amount for s in held) - 100_000
    c.report()  # the server's close arrives: what it really used
    assert cd.in_flight() == 100_000 + sum(s.used for s in c.held_slices())


def test_a_slice_without_room_for_another_charge_is_released_at_once() -> None:
    camp = _camp(budget=20_000_000)
    svc, clock = _svc(camp)
    net = _Direct(svc)
    c = BudgetClient("s", clock, net)
    c.report()
    c.admit(camp, clock.now(), 2_000_000)
    c.report()
    cd = svc.campaign_day(1, date(2026, 10, 20))
    (s,) = c.held_slices()
    n = 0
    while c.held_slices() and n < 100:
        assert c.admit(camp, clock.now(), 2_000_000) is None
        c.record_served(Served(1, date(2026, 10, 20), f"i{n}", 2_000_000, 0.0, 2_000_000))
        n += 1
    assert n == s.amount // 2_000_000
    c.report()
    assert cd.outstanding(clock.now().timestamp()) <= sum(
        x.amount for x in c.held_slices())


def test_campaign_created_mid_day_spreads_its_budget_over_the_rest_of_the_day() -> None:
    camp = _camp(budget=10_000_000)
    clock = ManualClock(NOW)  # 12:00 UTC
    svc = BudgetService(clock)
    svc.upsert_campaign(camp, created_at=NOW.timestamp())
    cd = svc.current(1, NOW.timestamp())
    elapsed = NOW.timestamp() - cd.start_s
    assert cd.plan.target_micros(elapsed) == 0.0  # nothing was due before it existed
    assert cd.plan.target_micros(86_400) == pytest.approx(10_000_000)
    # a campaign known since before the day started follows the whole-day curve
    svc2, _ = _svc(camp)
    full = svc2.current(1, NOW.timestamp()).plan
    assert full.target_micros(elapsed) > 0
