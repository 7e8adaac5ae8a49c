"""Budget service cold start, restart, standby takeover and the local-midnight rollover:
no grant for a campaign-day before its billed spend is read and every server synced;
what the old instance knew in flight is re-sent to the new one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import Served
from adfunnel.budget.http import HttpReportTransport, create_app
from adfunnel.budget.protocol import BilledUpdate, Reply, Report
from adfunnel.budget.rows import PacingStatus
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.model import BidType, Campaign, Objective, PacingMode
from adfunnel.clock import ManualClock
from adfunnel.sim.server_proc import free_port
from tests.http_server import serving
from tests.internal_token import INTERNAL_TOKEN

NOW = datetime(2026, 10, 20, 14, 0, tzinfo=UTC)
DAY = NOW.date()
CHARGE = 2_000
CAMP = Campaign(1, 1, "c", Objective.IMPRESSIONS, BidType.CPM, 2_000_000, 100_000, "UTC",
                date(2026, 1, 1), pacing_mode=PacingMode.ACCELERATED)


class _Switch:
    """In-memory transport to whichever service instance is current."""

    def __init__(self, svc: BudgetService) -> None:
        self.svc = svc

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        on_reply(self.svc.handle_report(report))


def _service(clock: ManualClock) -> BudgetService:
    svc = BudgetService(clock, warmup_s=3.0)
    svc.upsert_campaign(CAMP)
    return svc


def _billed(svc: BudgetService, micros: int, day: date = DAY) -> None:
    svc.record_billed(BilledUpdate(CAMP.id, day.isoformat(), micros, 0.0))


def _granted(c: BudgetClient) -> int:
    return sum(s.amount for s in c.held_slices())


def test_a_cold_instance_grants_nothing_before_billed_spend_and_every_server() -> None:
    clock = ManualClock(NOW)
    svc = _service(clock)
    net = _Switch(svc)
    clients = [BudgetClient(f"s{i}", clock, net) for i in range(4)]
    for c in clients:  # each server wants a slice: the campaign is new to them
        assert c.admit(CAMP, clock.now(), CHARGE) == "no_slice"
        c.report()
    clock.advance(5)
    for c in clients:
        c.admit(CAMP, clock.now(), CHARGE)
        c.report()  # synced with the instance, but billed spend not read yet
    assert sum(_granted(c) for c in clients) == 0
    assert svc.campaign_day(CAMP.id, DAY).status is PacingStatus.COLD
    _billed(svc, 90_000)  # today's ledger: 90 % already billed
    for c in clients:
        c.admit(CAMP, clock.now(), CHARGE)
        c.report()
    granted = sum(_granted(c) for c in clients)
    assert 0 < granted <= 100_000 - 90_000


def test_no_grant_until_every_live_server_has_synced() -> None:
    clock = ManualClock(NOW)
    svc = _service(clock)
    _billed(svc, 0)
    a, b = BudgetClient("a", clock, _Switch(svc)), BudgetClient("b", clock, _Switch(svc))
    a.report()
    b.report()
    clock.advance(5)
    a.admit(CAMP, clock.now(), CHARGE)
    a.report()  # a has synced, b has been heard but not yet re-sent
    assert _granted(a) == 0 and not svc.warm()
    b.report()
    a.report()
    assert svc.warm() and _granted(a) > 0


def test_a_restarted_instance_learns_the_spend_in_flight_before_granting() -> None:
    clock = ManualClock(NOW)
    old = _service(clock)
    _billed(old, 0)
    net = _Switch(old)
    c = BudgetClient("s", clock, net)
    c.report()
    clock.advance(4)
    c.report()
    assert old.warm()
    for i in range(20):  # 40,000 µ served and acknowledged, nothing billed yet
        c.record_served(Served(CAMP.id, DAY, f"i{i}", CHARGE, NOW.timestamp() + 3600, CHARGE))
    c.report()
    assert old.campaign_day(CAMP.id, DAY).in_flight() == 40_000
    clock.advance(1)
    new = _service(clock)  # the shard restarts: no memory
    net.svc = new
    _billed(new, 0)
    c.report()  # learns the new epoch: drops old slices, queues the re-send
    clock.advance(4)
    c.report()  # re-sends and names the epoch
    cd = new.campaign_day(CAMP.id, DAY)
    assert cd.in_flight() == 40_000
    assert c.stats["resyncs"] == 1
    c.admit(CAMP, clock.now(), CHARGE)
    c.report()
    assert cd.outstanding(clock.now().timestamp()) <= (100_000 - 40_000) // 2


def test_the_new_local_day_waits_for_its_own_billed_spend() -> None:
    clock = ManualClock(NOW.replace(hour=23, minute=59, second=50))
    svc = _service(clock)
    _billed(svc, 100_000)
    c = BudgetClient("s", clock, _Switch(svc))
    c.report()
    clock.advance(4)
    c.report()  # warm: today is exhausted
    assert c.admit(CAMP, clock.now(), CHARGE) == "budget_exhausted"
    clock.advance(10)
    c.report()
    # past local midnight: yesterday's "exhausted" does not stop today ...
    assert c.admit(CAMP, clock.now(), CHARGE) == "no_slice"
    c.report()
    assert _granted(c) == 0  # ... but nothing is granted before today's billed spend is read
    _billed(svc, 0, DAY + timedelta(days=1))
    c.admit(CAMP, clock.now(), CHARGE)
    c.report()
    assert _granted(c) > 0
    assert c.admit(CAMP, clock.now(), CHARGE) is None


def test_a_standby_takes_over_when_the_primary_does_not_answer() -> None:
    """The transport tries a shard's standby after its primary; the standby is a new
    instance, so the client re-syncs with it."""
    clock = ManualClock(NOW)
    standby = _service(clock)
    _billed(standby, 50_000)
    with serving(create_app(standby, token=INTERNAL_TOKEN)) as base:
        dead = f"http://127.0.0.1:{free_port()}"
        transport = HttpReportTransport([f"{dead}|{base}"], token=INTERNAL_TOKEN,
                                        timeout_s=2.0)
        c = BudgetClient("s", clock, transport)
        c.report()
        assert transport.base_urls == [base]
        clock.advance(4)
        c.admit(CAMP, clock.now(), CHARGE)
        c.report()
        assert 0 < _granted(c) <= 50_000 // 2
        transport.close()


def test_states_of_days_long_over_are_forgotten() -> None:
    clock = ManualClock(NOW)
    svc = _service(clock)
    _billed(svc, 0)
    c = BudgetClient("s", clock, _Switch(svc))
    c.report()
    clock.advance(4)
    c.report()
    assert c.admit(CAMP, clock.now(), CHARGE) in (None, "no_slice")
    assert any(day == DAY for _, day in c._state)
    clock.advance(3 * 86_400)
    c.report()
    assert not any(day == DAY for _, day in c._state)
    assert c.refusals == {} or all(day > DAY - timedelta(days=8) for _, day in c.refusals)
