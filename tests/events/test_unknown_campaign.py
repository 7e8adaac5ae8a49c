"""An aggregator on a real NATS JetStream log never drops the event of a campaign its
change feed has not applied yet (issue 22, §3): the event waits, unacknowledged, and is
billed once the feed applies the campaign.

A real campaign store (SQLite file) and read model with its change feed, polled by
hand so the beacon surely comes before the feed applies the new campaign.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime

import pytest

from adfunnel.billing.aggregator import Aggregator
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.budget.gate import LocalSpendGate
from adfunnel.campaigns.change_feed import ChangeFeed
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.readmodel import CampaignReadModel
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from adfunnel.events.jetstream_log import JetStreamEventLog
from adfunnel.events.model import Event, EventType

pytestmark = pytest.mark.nats

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def log(nats_url: str) -> Iterator[JetStreamEventLog]:
    suffix = uuid.uuid4().hex[:12]
    log = JetStreamEventLog(nats_url, stream=f"TEST_{suffix}", subject_prefix=f"test.{suffix}",
                            partitions=2, timeout_s=5.0)
    try:
        yield log
    finally:
        log.delete_stream()
        log.close()


def impression(campaign_id: int, imp: str) -> Event:
    return Event(event_type=EventType.IMPRESSION, impression_id=imp, campaign_id=campaign_id,
                 ad_id=1, placement="feed", price_micros=2_000_000, billing_type="CPM",
                 served_at=int(START.timestamp()), occurred_at=START.timestamp() + 1,
                 client_ip="81.2.69.142", user_agent="Mozilla/5.0")


def test_a_beacon_before_the_feed_applies_its_campaign_is_not_lost(
        log: JetStreamEventLog, sqlite_file_url: str) -> None:
    engine = make_engine(sqlite_file_url)
    upgrade(engine)
    clock = ManualClock(START)
    store = SqlCampaignStore(engine, clock)
    model = CampaignReadModel.read(store)
    feed = ChangeFeed(store, model, clock=clock, poll_s=3600.0)  # polled by hand below
    ledger = SqlLedger(engine)
    agg = Aggregator(log.consumer("ledger", ack_wait_s=30.0), ledger, model.campaign,
                     LocalSpendGate())
    try:
        advertiser = store.create_advertiser("a")
        campaign = store.create_campaign(
            advertiser_id=advertiser.id, name="new", objective="impressions",
            bid_type="CPM", bid_micros=2_000_000, daily_budget_micros=10**9,
            time_zone="UTC", flight_start=date(2026, 7, 1))
        log.publish(impression(campaign.id, "imp-new"))
        assert model.campaign(campaign.id) is None  # the feed has not applied it yet
        agg.run_once(timeout_s=5.0)
        assert agg.stats.unknown_retried == 1 and ledger.stats().rows == 0
        assert agg.run_once(timeout_s=0.2) == 0  # not acknowledged, not redelivered yet
        assert agg.stats.unknown_retried == 2  # retried with the batch that came empty
        feed.poll_once()  # the feed applies the campaign
        assert model.campaign(campaign.id) is not None
        agg.run_once(timeout_s=0.2)
        assert ledger.stats().rows == 1  # billed: not lost
        assert agg.stats.unknown_campaign == 0
        assert agg.first_deliveries == 1
        # acknowledged: a reader that takes over gets nothing again
        agg.consumer.close()
        again = log.consumer("ledger", ack_wait_s=30.0)
        assert again.fetch(10, 0.5) == []
        again.close()
    finally:
        agg.consumer.close()
        engine.dispose()
