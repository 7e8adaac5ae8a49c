"""Decisions of the per-campaign budget service kept by the columnar one (issue 11: a
replay's report depends on its seed only): the next day's first p is yesterday's at the
nearest elapsed *minute*; a slice past its expiry leaves the outstanding amount at once
but counts as used only where its own day is granted, billed or stepped; every report
makes the new local day of every campaign."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest

from adfunnel.budget.protocol import BilledUpdate, CampaignSpend, Report, ReportEntry
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.model import BidType, Campaign, Objective, PacingMode
from adfunnel.clock import ManualClock

DAY0 = datetime(2026, 5, 4, 0, 0, 5, tzinfo=UTC)


def _camp(cid: int, budget: int, mode: PacingMode = PacingMode.EVEN) -> Campaign:
    return Campaign(cid, 1, f"c{cid}", Objective.IMPRESSIONS, BidType.CPM, 2_000_000, budget,
                    "UTC", date(2026, 1, 1), pacing_mode=mode)


def _warm(clock: ManualClock, camps: list[Campaign]) -> BudgetService:
    svc = BudgetService(clock, warmup_s=0.0)
    for c in camps:
        svc.upsert_campaign(c)
    for c in camps:
        svc.record_billed(BilledUpdate(c.id, clock.now().date().isoformat(), 0,
                                       clock.now().timestamp() - 3600))
    first = svc.handle_report(Report("a", 0, clock.now().timestamp()))
    svc.handle_report(Report("a", 0, clock.now().timestamp(), epoch=first.epoch,
                             directives_version=first.version))
    return svc


@pytest.mark.slow
def test_the_next_days_first_p_is_yesterdays_at_the_nearest_minute() -> None:
    clock = ManualClock(DAY0)
    camps = [_camp(1, 20_000_000), _camp(2, 30_000_000), _camp(3, 10**12)]
    svc = _warm(clock, camps)
    rng = np.random.default_rng(3)
    seq = 0
    while clock.now() < DAY0 + timedelta(hours=23, minutes=50):
        # irregular steps: some minutes have none (a replay's clock jumps)
        clock.advance(float(rng.choice([10.0, 10.0, 10.0, 70.0, 430.0])))
        seq += 1
        spend = [CampaignSpend(c, clock.now().date().isoformat(), int(rng.integers(0, 40_000)),
                               0, 50_000, int(rng.integers(0, 8))) for c in (1, 2, 3)]
        svc.handle_report(Report("a", 0, clock.now().timestamp(),
                                 [ReportEntry(seq, clock.now().timestamp(), spend)],
                                 epoch=svc.epoch, directives_version=svc._version))
        svc.step()
    yesterday = clock.now().date()
    minutes = {c: svc.campaign_day(c, yesterday).p_by_minute for c in (1, 2, 3)}
    assert len({round(p, 12) for p in minutes[1].values()}) > 10  # p moved all day
    assert len(set(minutes[3].values())) == 1  # never paced down: one number
    clock.set(DAY0 + timedelta(days=1, minutes=37, seconds=20))  # idle past midnight
    svc.handle_report(Report("a", 0, clock.now().timestamp(), epoch=svc.epoch,
                             directives_version=svc._version))
    today = clock.now().date()
    for c in (1, 2, 3):
        by_minute = minutes[c]
        nearest = min(by_minute, key=lambda m: abs(m - 37))
        assert svc.campaign_day(c, today).ctl.p == by_minute[nearest]
    # the day over has given its p: its minutes are let go
    assert svc.campaign_day(1, yesterday).p_by_minute == {}
    assert len(svc._history.free) >= 2


def test_an_expired_slice_leaves_outstanding_at_once_and_is_used_at_its_days_events() -> None:
    clock = ManualClock(DAY0 + timedelta(hours=12))
    svc = _warm(clock, [_camp(1, 50_000_000, PacingMode.ACCELERATED),
                        _camp(2, 10**12, PacingMode.ACCELERATED)])
    svc.handle_report(Report("a", 0, clock.now().timestamp(), [ReportEntry(
        1, clock.now().timestamp(), [CampaignSpend(1, clock.now().date().isoformat(), 0, 0,
                                                   4_000_000, 0)])], epoch=svc.epoch))
    cd = svc.campaign_day(1, clock.now().date())
    assert cd.state.value == "metered"
    (grant,) = svc.handle_report(Report("a", 0, clock.now().timestamp(), wants=[1],
                                        epoch=svc.epoch)).grants
    clock.advance(31)  # past the slice's expiry, never closed
    svc.handle_report(Report("a", 0, clock.now().timestamp(), wants=[2], epoch=svc.epoch))
    assert cd.outstanding(clock.now().timestamp()) == 0
    assert cd.in_flight() == 0  # not yet marked used: no event of its own day
    assert int(svc._rows.sl_open[cd.row]) == 0
    svc.step()  # a step of its day marks it used (the worst case)
    assert cd.in_flight() == grant.amount_micros
    assert cd.slices[grant.slice_id].provisional


def test_every_report_makes_the_new_day_of_every_campaign() -> None:
    clock = ManualClock(DAY0.replace(hour=23, minute=59, second=50))
    svc = _warm(clock, [_camp(c, 10**9) for c in range(1, 6)])
    version = svc._version
    clock.advance(15)
    reply = svc.handle_report(Report("a", 0, clock.now().timestamp(), epoch=svc.epoch,
                                     directives_version=version))
    tomorrow = (DAY0 + timedelta(days=1)).date().isoformat()
    assert sorted(d.campaign_id for d in reply.directives if d.day == tomorrow) == [1, 2, 3, 4, 5]
    assert all(d.state == "metered" for d in reply.directives)  # billed spend not read yet


def test_a_new_campaign_takes_the_placement_average_at_the_next_poll(tmp_path,
                                                                      monkeypatch) -> None:
    """As a shape refresh at each poll with new campaigns did (every other campaign
    keeps its shape; the new one's first day takes it from then on), without reading
    the traffic log again inside the refresh's hour window."""
    from adfunnel.billing.sql_ledger import SqlLedger
    from adfunnel.budget.process import BudgetServiceProcess
    from adfunnel.campaigns.migrate import upgrade
    from adfunnel.campaigns.sql_store import SqlCampaignStore
    from adfunnel.db import make_engine
    from adfunnel.pacing.traffic_log import SqlTrafficLog

    engine = make_engine(f"sqlite:///{tmp_path / 's.sqlite3'}")
    upgrade(engine)
    clock = ManualClock(DAY0 + timedelta(hours=9))
    store = SqlCampaignStore(engine, clock)
    adv = store.create_advertiser("a")

    def create(name: str) -> Campaign:
        return store.create_campaign(
            advertiser_id=adv.id, name=name, objective=Objective.IMPRESSIONS,
            bid_type=BidType.CPM, bid_micros=2_000_000, daily_budget_micros=10**9,
            time_zone="UTC", flight_start=date(2026, 1, 1), pacing_mode=PacingMode.EVEN)

    old = [create(f"c{i}") for i in range(3)]
    hours = [DAY0 - timedelta(days=1) + timedelta(hours=h) for h in range(24)]
    SqlTrafficLog(engine).add({(c.id, at): (50 + 10 * h) * (i + 1)
                               for i, c in enumerate(old[:2]) for h, at in enumerate(hours)})
    proc = BudgetServiceProcess(store, SqlLedger(engine), clock, engine=engine,
                                expected_servers={"s"})
    proc.load()
    assert proc.refresh_shapes() == 2
    svc = proc.service
    before = {c.id: svc._bank.shapes.H[svc._slots.shape[svc._slot_of[c.id]]].copy()
              for c in old}
    reads: list[int] = []
    real = proc.traffic.by_utc_hour
    monkeypatch.setattr(proc.traffic, "by_utc_hour",
                        lambda since, until=None: (reads.append(1), real(since, until))[1])
    clock.advance(60)
    new = create("new")
    proc.poll_changes()
    assert reads == []
    assert np.array_equal(svc._bank.shapes.H[svc._slots.shape[svc._slot_of[new.id]]],
                          proc._last_shapes[1])
    assert np.array_equal(proc._last_shapes[1], before[old[2].id])  # the average
    for c in old:
        assert np.array_equal(svc._bank.shapes.H[svc._slots.shape[svc._slot_of[c.id]]],
                              before[c.id])
    today = svc.campaign_day(new.id, clock.now().date())
    assert today is not None and today.row >= 0
    # its first day too, from the poll on (issue 25: it kept the default, a flat curve)
    assert svc._rows.shape[today.row] == svc._slots.shape[svc._slot_of[new.id]]
    assert svc._rows.shape[today.row] != svc._default_sid
    clock.advance(3600)  # past the refresh's window: a refresh
    create("later")
    proc.poll_changes()
    assert reads == [1]
