"""The embedded default: the budget & pacing service in the ad-server process, ticked by
domain time."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

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
