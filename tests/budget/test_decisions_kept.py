"""Decisions of the per-campaign budget service kept by the columnar one (issue 11: a
replay's report depends on its seed only): the next day's first p is yesterday's at the
nearest elapsed *minute*; a slice past its expiry leaves the outstanding amount at once
but counts as used only where its own day is granted, billed or stepped; every report
makes the new local day of every campaign."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import numpy as np

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
