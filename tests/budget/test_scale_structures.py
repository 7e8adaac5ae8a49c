"""The budget service at catalogue scale (issue 11): work follows what changed.

Asserted on structure sizes and call counts, never on timing (``adfunnel bench budget``
measures speed): a report refreshes only the campaign-days it names, a slice is found
by its id, a control step is one vectorised pass, start-up reads in bulk, the embedded
admit's report round costs what it carries, midnight makes every new day at once."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.budget import service as service_module
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.embedded import InProcessBudget
from adfunnel.budget.gate import Served
from adfunnel.budget.process import BudgetServiceProcess
from adfunnel.budget.protocol import BilledUpdate, CampaignSpend, Report, ReportEntry, SliceUse
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import BidType, Campaign, Objective, PacingMode
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
DAY = "2026-10-20"
N = 2_000


def _camp(cid: int, budget: int = 100_000_000, tz: str = "UTC") -> Campaign:
    return Campaign(cid, 1, f"c{cid}", Objective.CLICKS, BidType.CPC, 1_000_000, budget, tz,
                    date(2026, 1, 1))


def _warm(clock: ManualClock, n: int = N) -> BudgetService:
    svc = BudgetService(clock, warmup_s=0.0)
    svc.upsert_campaigns([_camp(cid, 5_000_000 if cid == 1 else 100_000_000)
                          for cid in range(1, n + 1)])
    svc.record_billed_bulk(_billed_columns(np.arange(1, n + 1)))
    first = svc.handle_report(Report("a", 0, NOW.timestamp()))
    svc.handle_report(Report("a", 0, NOW.timestamp(), epoch=first.epoch,
                             directives_version=first.version))
    assert svc.warm()
    return svc


def _billed_columns(ids: np.ndarray, billed: int = 0) -> Any:
    from adfunnel.budget.protocol import BilledColumns

    k = len(ids)
    return BilledColumns(ids, np.full(k, NOW.date().toordinal()), np.full(k, billed),
                         np.zeros(k), np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64))


class _Refreshes:
    """Records the rows of every state refresh of one service."""

    def __init__(self, svc: BudgetService, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows: list[int] = []
        real = svc._refresh

        def spy(rows: np.ndarray, now: float) -> None:
            self.rows.extend(rows.tolist())
            real(rows, now)

        monkeypatch.setattr(svc, "_refresh", spy)

    def campaigns(self, svc: BudgetService) -> set[int]:
        return {svc._slots.cid[svc._rows.slot[r]] for r in self.rows}


def test_a_report_refreshes_only_the_campaign_days_it_names(monkeypatch) -> None:
    clock = ManualClock(NOW)
    svc = _warm(clock)
    seen = _Refreshes(svc, monkeypatch)
    spend = [CampaignSpend(cid, DAY, 1_000, 0, 1_000, 1) for cid in (17, 1234)]
    svc.handle_report(Report("a", 0, NOW.timestamp(), [ReportEntry(1, NOW.timestamp(), spend)],
                             epoch=svc.epoch, directives_version=svc._version))
    assert seen.campaigns(svc) == {17, 1234}
    assert set(svc._buckets) == {svc._row_of[17 << 22 | NOW.date().toordinal()],
                                 svc._row_of[1234 << 22 | NOW.date().toordinal()]}
    assert len(svc._rates) == 2 and not svc._slices


def test_a_slice_is_found_by_its_id_and_its_close_moves_only_its_day(monkeypatch) -> None:
    clock = ManualClock(NOW)
    svc = _warm(clock)
    reply = svc.handle_report(Report("a", 0, NOW.timestamp(), wants=[1], epoch=svc.epoch))
    (grant,) = reply.grants
    assert svc._slice_row == {grant.slice_id: svc.campaign_day(1, NOW.date()).row}
    seen = _Refreshes(svc, monkeypatch)
    close = ReportEntry(1, NOW.timestamp(), closed_slices=[SliceUse(grant.slice_id, 1_000,
                                                                    NOW.timestamp())])
    before = svc._rows.sl_used.copy(), svc._rows.sl_open.copy()
    svc.handle_report(Report("a", 0, NOW.timestamp(), [close], epoch=svc.epoch,
                             directives_version=svc._version))
    # a close refreshes no state (the day's next refresh reads it), and moves only the
    # slice accounting of its own day
    assert seen.rows == []
    row = svc.campaign_day(1, NOW.date()).row
    moved = np.flatnonzero((svc._rows.sl_used != before[0]) | (svc._rows.sl_open != before[1]))
    assert moved.tolist() == [row]
    assert svc.campaign_day(1, NOW.date()).in_flight() == 1_000
    assert svc.campaign_day(1, NOW.date()).outstanding(NOW.timestamp()) == 0


def test_a_control_step_is_one_vectorised_pass(monkeypatch) -> None:
    clock = ManualClock(NOW)
    svc = _warm(clock)
    calls: list[int] = []
    real = service_module.controller.step_arrays

    def counted(state: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(state.p))
        return real(state, *args, **kwargs)

    def scalar(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a per-campaign controller step")

    monkeypatch.setattr(service_module.controller, "step_arrays", counted)
    monkeypatch.setattr(service_module.controller, "step", scalar)
    seen = _Refreshes(svc, monkeypatch)
    clock.advance(10)
    svc.step()
    assert calls == [N]
    assert sorted(seen.rows) == sorted(set(seen.rows)) and len(seen.rows) == N


def test_midnight_makes_every_new_day_at_once_and_sends_it() -> None:
    clock = ManualClock(NOW.replace(hour=23, minute=59, second=55))
    svc = BudgetService(clock, warmup_s=0.0)
    svc.upsert_campaigns([_camp(cid) for cid in range(1, 101)])
    first = svc.handle_report(Report("a", 0, clock.now().timestamp()))
    version = svc.handle_report(Report("a", 0, clock.now().timestamp(), epoch=first.epoch,
                                       directives_version=first.version)).version
    clock.advance(10)
    created: list[int] = []
    real = svc._new_rows

    def spy(slots: np.ndarray, days: np.ndarray, now: float) -> np.ndarray:
        created.append(len(slots))
        return real(slots, days, now)

    svc._new_rows = spy  # type: ignore[method-assign]
    svc.step()
    assert created == [100]
    reply = svc.handle_report(Report("a", 0, clock.now().timestamp(), epoch=svc.epoch,
                                     directives_version=version))
    assert {d.day for d in reply.directives} == {"2026-10-21"} and len(reply.directives) == 100


def test_days_long_over_are_forgotten_with_their_index_entries() -> None:
    clock = ManualClock(NOW)
    svc = _warm(clock, 10)
    svc.handle_report(Report("a", 0, NOW.timestamp(), wants=[1], epoch=svc.epoch))
    assert svc._slice_row
    for _ in range(4):
        clock.advance(86_400)
        svc.step()
    assert len(svc._row_of) == 10 * 3  # today, yesterday, the day before
    assert not svc._slice_row and not svc._slices
    assert svc._rows.n == 10 * 4  # the fifth day reused the first day's rows


@pytest.mark.slow
def test_shapes_table_stays_bounded_and_days_keep_their_curves() -> None:
    clock = ManualClock(NOW)
    svc = _warm(clock, 300)
    rng = np.random.default_rng(1)
    ids = np.arange(1, 301)
    # their first shapes: today's days, made on the default, take them from now (issue 25)
    svc.set_traffic_shapes(ids, rng.random((300, 24)) + 0.01, others=[1.0] * 24)
    cd = svc.current(5, NOW.timestamp())
    before = cd.plan.target_micros(13 * 3600)
    for _ in range(39):
        svc.set_traffic_shapes(ids, rng.random((300, 24)) + 0.01, others=[1.0] * 24)
    assert svc._bank.shapes.n < 3 * 4096
    assert svc.current(5, NOW.timestamp()).plan.target_micros(13 * 3600) == before


def test_bulk_and_single_billed_updates_agree() -> None:
    clock = ManualClock(NOW)
    one, bulk = BudgetService(clock, warmup_s=0.0), BudgetService(clock, warmup_s=0.0)
    camps = [_camp(cid) for cid in range(1, 41)]
    for svc in (one, bulk):
        svc.upsert_campaigns(camps)
        for cid in range(1, 41):
            svc.handle_report(Report("a", 0, NOW.timestamp(), [ReportEntry(
                cid, NOW.timestamp() - 30, [CampaignSpend(cid, DAY, 10_000 * cid, 0, 0, 1)])]))
    ids = np.arange(1, 41)
    cols = _billed_columns(ids)
    cols = type(cols)(ids, cols.days, ids * 7_000, np.full(40, NOW.timestamp() - 10.0),
                      ids * 100, ids * 3)
    bulk.record_billed_bulk(cols)
    for i, cid in enumerate(ids.tolist()):
        one.record_billed(BilledUpdate(cid, DAY, int(cols.billed_micros[i]),
                                       float(cols.complete_before[i]),
                                       int(cols.settled_after_micros[i]),
                                       int(cols.lifetime_billed_before_micros[i])))
    for cid in range(1, 41):
        a, b = one.campaign_day(cid, NOW.date()), bulk.campaign_day(cid, NOW.date())
        assert (a.billed, a.in_flight(), a.state, a.lifetime_billed_before, a.watermark) == (
            b.billed, b.in_flight(), b.state, b.lifetime_billed_before, b.watermark)


@pytest.fixture
def bulk_db(tmp_path) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 'b.sqlite3'}")
    upgrade(engine)
    clock = ManualClock(NOW)
    store = SqlCampaignStore(engine, clock)
    adv = store.create_advertiser("a")
    for i in range(60):
        store.create_campaign(
            advertiser_id=adv.id, name=f"c{i}", objective=Objective.IMPRESSIONS,
            bid_type=BidType.CPM, bid_micros=2_000_000, daily_budget_micros=10_000_000,
            time_zone=("UTC", "Asia/Tokyo", "America/New_York")[i % 3],
            flight_start=date(2026, 1, 1), pacing_mode=PacingMode.EVEN)
    yield engine, clock, store
    engine.dispose()


def test_start_up_reads_campaigns_and_billed_spend_in_bulk(bulk_db, monkeypatch) -> None:
    engine, clock, store = bulk_db
    ledger = SqlLedger(engine)
    calls: dict[str, int] = {}
    for name in ("billed_on", "settled_since", "lifetime_billed", "day_totals"):
        real = getattr(ledger, name)
        monkeypatch.setattr(ledger, name, _counting(calls, name, real))
    for name in ("get_campaign", "list_campaigns", "snapshot"):
        monkeypatch.setattr(store, name, _counting(calls, name, getattr(store, name)))
    clock.advance(5 * 3600)  # 17:00 UTC: Tokyo's day is the 21st, the others' the 20th
    proc = BudgetServiceProcess(store, ledger, clock, engine=engine, expected_servers={"s"})
    proc.load()
    proc.feed_billed()
    assert calls == {"billed_on": 2, "settled_since": 2}  # two local days, one window
    svc = proc.service
    assert len(svc.owned()) == 60 and svc._campaigns == {}  # columns, no record objects
    assert svc.campaign_day(1, NOW.date()).billed == 0
    assert svc.campaign_day(2, NOW.date() + timedelta(days=1)).billed == 0  # Tokyo
    # a view still reaches the record, through the store
    assert svc.current(2, clock.now().timestamp()).campaign.time_zone == "Asia/Tokyo"


def _counting(calls: dict[str, int], name: str, fn: Any) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls[name] = calls.get(name, 0) + 1
        return fn(*args, **kwargs)

    return wrapped


def test_the_embedded_admit_asks_with_a_report_round_that_costs_what_it_carries(
        bulk_db, monkeypatch) -> None:
    engine, clock, store = bulk_db
    gate = InProcessBudget(store, SqlLedger(engine), clock, engine=engine, background=False)
    camp = store.get_campaign(1)
    sent = gate.client.stats["sent"]
    reports: list[Report] = []
    replies: list[Any] = []
    svc = gate.process.service
    real = svc.handle_report

    def spy(r: Report) -> Any:
        reports.append(r)
        replies.append(real(r))
        return replies[-1]

    gate.process.service.handle_report = spy  # type: ignore[method-assign]
    seen = _Refreshes(svc, monkeypatch)
    assert gate.admit(camp, clock.now(), 2_000) is None  # metered: a slice was asked
    assert gate.client.stats["sent"] == sent + 1 and len(reports) == 1
    assert reports[0].wants == [1] and len(replies[0].grants) == 1
    assert seen.campaigns(svc) == {1}  # the one campaign-day it asked for
    assert len(replies[0].directives) == 1  # what changed since the last reply
    assert gate.client.held_slices()
    gate.record_served(Served(1, NOW.date(), "i1", 2_000, NOW.timestamp() + 3600, 2_000))
    clock.advance(1)
    gate.tick()
    assert gate.process.service.campaign_day(1, NOW.date()).served_total == 2_000


def test_a_decisions_asks_share_one_report_round_on_the_system_clock(bulk_db) -> None:
    """``ask_many``: every metered campaign without a slice asked in one round (the
    columnar decider's path on the system clock), each then admitted from its slice."""
    engine, clock, store = bulk_db
    gate = InProcessBudget(store, SqlLedger(engine), clock, engine=engine, background=False)
    assert not gate.asks_together  # a manual clock asks one campaign at a time
    camps = [store.get_campaign(cid) for cid in range(1, 41)]
    sent = gate.client.stats["sent"]
    reasons = gate.ask_many(camps, clock.now(), [2_000] * len(camps))
    assert reasons == [None] * len(camps)
    assert gate.client.stats["sent"] == sent + 1
    assert {s.campaign_id for s in gate.client.held_slices()} == set(range(1, 41))
    assert gate.ask_many(camps[:3], clock.now(), [2_000] * 3) == [None] * 3  # from slices
    assert gate.client.stats["sent"] == sent + 1


def test_a_client_keeps_admitting_through_changes_only_replies() -> None:
    clock = ManualClock(NOW)
    svc = _warm(clock, 20)

    class Direct:
        def send_report(self, report: Report, on_reply: Any) -> None:
            on_reply(svc.handle_report(report))

    c = BudgetClient("s", clock, Direct())
    camp = _camp(3)
    c.report()
    assert c.admit(camp, clock.now(), 1_000_000) == "no_slice"
    c.report()  # the want is answered with a slice and the campaign's state
    assert c.admit(camp, clock.now(), 1_000_000) is None
    c.record_served(Served(3, NOW.date(), "i", 100_000, NOW.timestamp() + 60, 1_000_000))
    for _ in range(3):
        clock.advance(5)
        c.report()
        svc.step()
    c.report()
    assert c.state(3, NOW.date()).value == "open"
    assert c.admit(camp, clock.now() + timedelta(seconds=1), 1_000_000) is None


def test_wants_of_one_report_get_the_slices_one_report_each_would_get() -> None:
    """Grants of many wants are made together (one refresh before, one after); each is
    what the campaign would get asked alone, and the rows end in the same state."""
    together, alone = _warm(ManualClock(NOW), 50), _warm(ManualClock(NOW), 50)
    spend = [CampaignSpend(cid, DAY, 0, 0, demand_micros=cid * 400_000) for cid in range(1, 9)]
    epoch, v = together.epoch, together._version
    wants = [3, 1, 7, 2, 99, 5]  # 99 is unknown
    a = together.handle_report(Report("a", 0, NOW.timestamp(), [ReportEntry(1, NOW.timestamp(),
                                      spend)], wants, epoch=epoch, directives_version=v))
    alone.handle_report(Report("a", 0, NOW.timestamp(), [ReportEntry(1, NOW.timestamp(), spend)],
                               epoch=alone.epoch, directives_version=alone._version))
    b = [g for cid in wants for g in alone.handle_report(Report(
        "a", 0, NOW.timestamp(), [], [cid], epoch=alone.epoch,
        directives_version=alone._version)).grants]
    assert [(g.campaign_id, g.amount_micros, g.worst_case) for g in a.grants] == [
        (g.campaign_id, g.amount_micros, g.worst_case) for g in b]
    assert len(a.grants) == 5
    for cid in range(1, 9):
        x, y = together.campaign_day(cid, NOW.date()), alone.campaign_day(cid, NOW.date())
        assert (x.state, x.status, x.committed(NOW.timestamp())) == (
            y.state, y.status, y.committed(NOW.timestamp()))
