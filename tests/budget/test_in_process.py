"""The embedded default: the budget & pacing service in the ad-server process, ticked by
domain time."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.budget.embedded import InProcessBudget
from adfunnel.budget.gate import Served
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import BidType, Campaign, Objective, PacingMode
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import Clock, ManualClock
from adfunnel.db import make_engine

T0 = datetime(2026, 7, 15, 0, 0, tzinfo=UTC)


@pytest.mark.slow
def test_spends_up_to_the_budget_and_stops(tmp_path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'b.sqlite3'}")
    upgrade(engine)
    clock = ManualClock(T0)
    store, ledger = SqlCampaignStore(engine, clock), SqlLedger(engine)
    adv = store.create_advertiser("a")
    camp = store.create_campaign(
        advertiser_id=adv.id, name="c", objective=Objective.IMPRESSIONS, bid_type=BidType.CPM,
        bid_micros=5_000_000, daily_budget_micros=100_000, time_zone="UTC",
        flight_start=date(2026, 1, 1), pacing_mode=PacingMode.ACCELERATED)
    gate = InProcessBudget(store, ledger, clock, engine=engine, background=False)
    billed = served = 0
    reasons = set()
    for i in range(3_000):  # one request every 2 s for 100 minutes
        now = clock.advance(2.0)
        reason = gate.admit(camp, now, 5_000)
        if reason is not None:
            reasons.add(reason)
            continue
        served += 1
        gate.record_served(Served(camp.id, now.date(), f"i{i}", 5_000, now.timestamp() + 3600,
                                  max_charge_micros=5_000))
        rec = ledger.record(LedgerEvent(f"i{i}", EventType.IMPRESSION, camp.id, 1, "p", "CPM",
                                        5_000, now, now.date()), camp.daily_budget_micros)
        billed += rec.billed_micros
        assert rec.absorbed_micros == 0
    assert billed <= 100_000
    assert billed >= 80_000  # the budget is spent, bar the last few charges
    assert "budget_exhausted" in reasons
    status = {s["campaign_id"]: s for s in gate.status()}[camp.id]
    assert status["state"] == "exhausted"
    assert clock.now() - T0 == timedelta(seconds=6_000)


def _metered_gate(tmp_path: Path, clock: Clock) -> tuple[InProcessBudget, Campaign]:
    engine = make_engine(f"sqlite:///{tmp_path / 'w.sqlite3'}")
    upgrade(engine)
    store = SqlCampaignStore(engine, clock)
    adv = store.create_advertiser("a")
    camp = store.create_campaign(
        advertiser_id=adv.id, name="c", objective=Objective.IMPRESSIONS, bid_type=BidType.CPM,
        bid_micros=5_000_000, daily_budget_micros=10_000_000, time_zone="UTC",
        flight_start=date(2026, 1, 1), pacing_mode=PacingMode.EVEN)
    return InProcessBudget(store, SqlLedger(engine), clock, engine=engine,
                           background=False), camp


@pytest.mark.slow
def test_a_slice_ask_waits_for_a_busy_service_only_on_a_manual_clock(tmp_path) -> None:
    """On the system clock a decision's ask gives up after ``ASK_WAIT_S`` while a control
    step holds the service (the want goes with the next report); on a manual clock it
    waits, so a replay never depends on the machine's timing."""
    import threading
    import time

    from adfunnel.budget.embedded import ASK_WAIT_S
    from adfunnel.clock import FixedClock

    gate, camp = _metered_gate(tmp_path, FixedClock(datetime.now(UTC)))
    with gate.process.lock:  # a long control step
        t0 = time.perf_counter()
        assert gate.admit(camp, datetime.now(UTC), 5_000) == "no_slice"
        assert time.perf_counter() - t0 < ASK_WAIT_S + 0.5
    assert gate._transport.skipped == 1
    assert gate.admit(camp, datetime.now(UTC) + timedelta(seconds=1), 5_000) is None

    clock = ManualClock(T0)
    (tmp_path / "m").mkdir()
    gate, camp = _metered_gate(tmp_path / "m", clock)
    released = threading.Event()

    def hold() -> None:
        with gate.process.lock:
            released.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    threading.Timer(0.2, released.set).start()
    t0 = time.perf_counter()
    assert gate.admit(camp, clock.now(), 5_000) is None  # waited for the step, then asked
    assert time.perf_counter() - t0 >= 0.15
    holder.join()
    assert gate._transport.skipped == 0


def _pacing_status(gate: InProcessBudget, campaign_id: int) -> str:
    return str({s["campaign_id"]: s for s in gate.status()}[campaign_id]["status"])


@pytest.mark.slow
def test_limited_by_bid_only_once_a_quarter_hour_behind_at_full_participation(tmp_path) -> None:
    """A campaign that asks all day but wins one auction in ten at a fraction of its bid
    runs at p = 1 far behind its curve. Five minutes in (0.0035 of the day behind on a
    flat curve) it is not yet ``limited_by_bid_or_audience`` (the dashboard read
    "limited by bid" a minute into a new campaign's day); an hour in it is. Mutation
    that turns it red: the threshold back at 0.002 of the day."""
    clock = ManualClock(T0 + timedelta(hours=9))
    engine = make_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}")
    upgrade(engine)
    store, ledger = SqlCampaignStore(engine, clock), SqlLedger(engine)
    camp = store.create_campaign(
        advertiser_id=store.create_advertiser("a").id, name="c",
        objective=Objective.IMPRESSIONS, bid_type=BidType.CPM, bid_micros=5_000_000,
        daily_budget_micros=1_000_000_000, time_zone="UTC", flight_start=date(2026, 1, 1),
        pacing_mode=PacingMode.EVEN)
    gate = InProcessBudget(store, ledger, clock, engine=engine, background=False)
    seen: dict[int, str] = {}
    for i in range(1, 1_801):  # one ask every 2 s for an hour
        now = clock.advance(2.0)
        if gate.admit(camp, now, 5_000) is None and i % 10 == 0:
            gate.record_served(Served(camp.id, now.date(), f"i{i}", 5_000,
                                      now.timestamp() + 3600, max_charge_micros=5_000))
            ledger.record(LedgerEvent(f"i{i}", EventType.IMPRESSION, camp.id, 1, "p", "CPM",
                                      5_000, now, now.date()), camp.daily_budget_micros)
        if i in (150, 1_800):
            seen[i] = _pacing_status(gate, camp.id)
    assert seen[150] == "pacing", seen
    assert seen[1_800] == "limited_by_bid_or_audience", seen
