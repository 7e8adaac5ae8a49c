"""Replies carry directive changes (issue 11): after the first reply only the
campaign-days whose state or p changed since the server's version, plus those it asks
about or reports spend on; everything again for a new server, a new instance (epoch)
or a server whose version fell out of the change log."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.protocol import BilledUpdate, CampaignSpend, Reply, Report, ReportEntry
from adfunnel.budget.reports import ACK_KEPT_S
from adfunnel.budget.service import BudgetService
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
DAY = "2026-10-20"
N = 50


def _camp(cid: int, budget: int = 100_000_000) -> Campaign:
    return Campaign(cid, 1, f"c{cid}", Objective.CLICKS, BidType.CPC, 1_000_000, budget, "UTC",
                    date(2026, 1, 1))


def _svc(clock: ManualClock, n: int = N) -> BudgetService:
    svc = BudgetService(clock, warmup_s=0.0)
    for cid in range(1, n + 1):
        svc.upsert_campaign(_camp(cid))
        svc.record_billed(BilledUpdate(cid, DAY, 0, 0.0))
    return svc


class _Server:
    """Reports as an ad server does: the epoch and version of its last reply."""

    def __init__(self, svc: BudgetService, name: str = "a") -> None:
        self.svc, self.name, self.seq = svc, name, 0
        self.epoch, self.version = "", -1

    def report(self, spend: list[CampaignSpend] | None = None,
               wants: list[int] | None = None) -> Reply:
        entries = []
        if spend:
            self.seq += 1
            entries = [ReportEntry(self.seq, self.svc.clock.now().timestamp(), spend)]
        reply = self.svc.handle_report(Report(
            self.name, 0, self.svc.clock.now().timestamp(), entries, wants or [],
            epoch=self.epoch, directives_version=self.version))
        if reply.epoch != self.epoch:
            self.epoch, self.version = reply.epoch, -1
        self.version = max(self.version, reply.version)
        return reply


def _ids(reply: Reply) -> list[int]:
    return [d.campaign_id for d in reply.directives]


def test_a_reply_after_the_first_carries_only_changed_directives() -> None:
    clock = ManualClock(NOW)
    svc = _svc(clock)
    a = _Server(svc)
    assert _ids(a.report()) == list(range(1, N + 1))  # first contact: everything
    # names the epoch now: warm, but a cold campaign-day was metered and still is
    assert a.report().directives == []
    # spend on campaign 3 and a want for 9: their states are sent, nothing else
    assert sorted(_ids(a.report([CampaignSpend(3, DAY, 5_000, 0, 5_000, 5)], [9]))) == [3, 9]
    assert a.report().directives == []
    # a billed total that meters campaign 7 changes its state: only 7 goes out
    svc.record_billed(BilledUpdate(7, DAY, 99_500_000, NOW.timestamp()))
    reply = a.report()
    assert [(d.campaign_id, d.state) for d in reply.directives] == [(7, "exhausted")]
    # a control step measures campaign 3's rate: it opens; the others stay as they were
    clock.advance(10)
    svc.step()
    reply = a.report()
    assert [(d.campaign_id, d.state) for d in reply.directives] == [(3, "open")]
    assert a.report().directives == []


def test_a_second_server_gets_everything_on_first_contact() -> None:
    clock = ManualClock(NOW)
    svc = _svc(clock)
    a = _Server(svc, "a")
    a.report()
    a.report()
    assert a.report().directives == []
    b = _Server(svc, "b")
    assert len(b.report().directives) == N


def test_a_server_silent_longer_than_the_change_log_keeps_gets_everything() -> None:
    clock = ManualClock(NOW)
    svc = _svc(clock)
    a, b = _Server(svc, "a"), _Server(svc, "b")
    for s in (a, b, a, b):
        s.report()
    clock.advance(ACK_KEPT_S + 1)
    svc.record_billed(BilledUpdate(5, DAY, 99_500_000, clock.now().timestamp()))
    assert _ids(b.report()) == [5]  # b's version is still in the log
    clock.advance(1)
    b.report()  # b acknowledges: the log is trimmed past a's old version
    assert len(a.report().directives) == N


def test_a_restarted_instance_gives_each_server_every_state() -> None:
    clock = ManualClock(NOW)
    old = _svc(clock)
    net = _Switch(old)
    clients = [BudgetClient(f"s{i}", clock, net) for i in range(3)]
    for c in clients:
        c.report()
        c.report()
    old.record_billed(BilledUpdate(4, DAY, 99_500_000, NOW.timestamp()))
    for c in clients:
        c.report()
        assert c.state(4, NOW.date()) is BudgetState.EXHAUSTED
    new = _svc(clock)  # a new instance: new epoch, nothing known of the servers
    new.record_billed(BilledUpdate(4, DAY, 99_500_000, NOW.timestamp()))
    net.svc = new
    sizes = []
    net.on_reply = lambda r: sizes.append(len(r.directives))
    for c in clients:
        c.report()  # names the old epoch: the reply carries every state
    assert sizes == [N, N, N]
    for c in clients:
        c.report()  # synced with the new epoch: every state again (version -1), then changes
    sizes.clear()
    for c in clients:
        c.report()
    assert sizes == [0, 0, 0]
    for c in clients:
        assert c.state(4, NOW.date()) is BudgetState.EXHAUSTED
        assert all(c.state(cid, NOW.date()) is BudgetState.METERED
                   for cid in range(1, N + 1) if cid != 4)


def test_client_states_follow_the_service_through_changes() -> None:
    clock = ManualClock(NOW)
    svc = _svc(clock)
    c = BudgetClient("s", clock, _Switch(svc))
    c.report()
    for i in range(30):
        cid = 1 + (7 * i) % N
        if i % 3 == 0:
            svc.record_billed(BilledUpdate(cid, DAY, (i + 1) * 3_000_000, clock.now().timestamp()))
        svc.handle_report(Report("other", 0, clock.now().timestamp(), [ReportEntry(
            i + 1, clock.now().timestamp(), [CampaignSpend(cid, DAY, 50_000, 0, 50_000, 3)])]))
        clock.advance(5)
        if i % 2:
            svc.step()
        c.report()
        truth = {d.campaign_id: (d.state, d.p) for d in svc.directives()}
        mine = {cid: (c.state(cid, NOW.date()).value, c.pacing_rate(cid)) for cid in truth}
        assert mine == truth


def test_an_older_reply_arriving_late_does_not_undo_a_newer_one() -> None:
    clock = ManualClock(NOW)
    svc = _svc(clock, 3)
    held: list[Reply] = []
    net = _Switch(svc)
    c = BudgetClient("s", clock, net)
    c.report()
    c.report()
    net.on_reply = held.append
    net.deliver = False
    c.report()  # reply 1 (open state unknown yet) is held back
    svc.record_billed(BilledUpdate(2, DAY, 99_500_000, NOW.timestamp()))
    c.report()  # reply 2 carries campaign 2's exhaustion
    older, newer = held
    assert older.version < newer.version
    c.handle_reply(newer)
    c.handle_reply(older)  # late: must not bring campaign 2 back
    assert c.state(2, NOW.date()) is BudgetState.EXHAUSTED


class _Switch:
    """In-memory transport to whichever instance is current; optionally holds replies."""

    def __init__(self, svc: BudgetService) -> None:
        self.svc = svc
        self.deliver = True
        self.on_reply: Callable[[Reply], None] | None = None

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        reply = self.svc.handle_report(report)
        if self.on_reply is not None:
            self.on_reply(reply)
        if self.deliver:
            on_reply(reply)
