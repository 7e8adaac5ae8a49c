"""An event the ledger's database refuses stops nobody's billing: on PostgreSQL (which
stores no NUL in text) a batch holding one such event bills the others, rejects and
counts that one, and acknowledges them all; a money-rule refusal likewise."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

import pytest

from adfunnel.billing.aggregator import Aggregator
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.budget.gate import LocalSpendGate
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.readmodel import CampaignReadModel
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from adfunnel.events.memory_log import MemoryEventLog
from adfunnel.events.model import Event, EventType

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
PRICE = 2_000_000  # CPM: 2,000 micros an impression


def impression(campaign_id: int, imp: str, placement: str = "feed", price: int = PRICE,
               kind: EventType = EventType.IMPRESSION, billing_type: str = "CPM") -> Event:
    return Event(event_type=kind, impression_id=imp, campaign_id=campaign_id,
                 ad_id=1, placement=placement, price_micros=price, billing_type=billing_type,
                 served_at=int(START.timestamp()), occurred_at=START.timestamp() + 1,
                 client_ip="81.2.69.142", user_agent="Mozilla/5.0")


@pytest.fixture
def world(pg_schema_url: str) -> Iterator[dict[str, Any]]:
    engine = make_engine(pg_schema_url)
    upgrade(engine)
    clock = ManualClock(START)
    store = SqlCampaignStore(engine, clock)
    advertiser = store.create_advertiser("a")
    campaign = store.create_campaign(
        advertiser_id=advertiser.id, name="c", objective="impressions", bid_type="CPM",
        bid_micros=PRICE, daily_budget_micros=10**9, time_zone="UTC",
        flight_start=date(2026, 7, 1))
    cpc = store.create_campaign(
        advertiser_id=advertiser.id, name="k", objective="clicks", bid_type="CPC",
        bid_micros=PRICE, daily_budget_micros=10**9, time_zone="UTC",
        flight_start=date(2026, 7, 1))
    model = CampaignReadModel.read(store)
    log = MemoryEventLog(clock, partitions=1)
    ledger = SqlLedger(engine)
    agg = Aggregator(log.consumer("ledger"), ledger, model.campaign, LocalSpendGate())
    try:
        yield {"log": log, "ledger": ledger, "agg": agg, "cid": campaign.id, "cpc": cpc.id,
               "clock": clock}
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_nul_the_database_refuses_is_rejected_and_the_rest_billed(
        world: dict[str, Any]) -> None:
    """Breaks without the one-by-one retry (tried: ``record_isolating`` returning
    ``ledger.record_many(writes)`` alone: the batch raises ``DataError`` for ever and
    nothing bills) and when the refused event is acknowledged unrecorded without being
    counted."""
    log, agg, ledger, cid = world["log"], world["agg"], world["ledger"], world["cid"]
    log.publish_many([impression(cid, "good-1"), impression(cid, "bad", placement="x\x00y"),
                      impression(cid, "good-2")])
    assert agg.run_once(timeout_s=0.0) == 3
    assert ledger.stats().rows == 2
    assert agg.stats.billed == 2 and agg.stats.store_refused == 1
    assert agg.outcomes["store_refused"] == 1
    # all three acknowledged: nothing comes again, the next batch bills as usual
    world["clock"].advance(3600)
    assert agg.run_once(timeout_s=0.0) == 0
    log.publish(impression(cid, "good-3"))
    assert agg.run_once(timeout_s=0.0) == 1
    assert ledger.stats().rows == 3 and agg.stats.store_refused == 1


@pytest.mark.postgres
def test_a_charge_the_money_rules_refuse_is_rejected_alone(world: dict[str, Any]) -> None:
    """A click priced beyond what the ledger can store in millimicros (no tracker makes
    one; a foreign producer might) is a :class:`MoneyError` of that event only. Breaks
    when ``MoneyError`` is left out of ``UNSTORABLE`` (the batch fails whole, for ever)."""
    log, agg, ledger, cid = world["log"], world["agg"], world["ledger"], world["cid"]
    log.publish_many([impression(world["cpc"], "huge", price=10**16, kind=EventType.CLICK,
                                 billing_type="CPC"),
                      impression(cid, "ok")])
    assert agg.run_once(timeout_s=0.0) == 2
    assert ledger.stats().rows == 1
    assert agg.stats.store_refused == 1
