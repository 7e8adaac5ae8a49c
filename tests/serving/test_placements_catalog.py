"""Placements and ad quality reach every ad server: boot snapshot, change feed, versions."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from adfunnel.campaigns.change_feed import ChangeFeed
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import BidType, ChangeRecord, HouseAd, Objective, Placement
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import FixedClock
from adfunnel.db import make_engine
from adfunnel.index import ScanIndex
from adfunnel.serving.catalog import Catalog, Snapshot

NOW = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
HOUSE = HouseAd("house.png", "https://operator.test/", "banner", 300, 250)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url = request.getfixturevalue("pg_schema_url")
    else:
        url = f"sqlite:///{tmp_path / 'placements.sqlite3'}"
    upgrade(url)
    return url


def _store(url: str) -> SqlCampaignStore:
    return SqlCampaignStore(make_engine(url), FixedClock(NOW))


def test_boot_snapshot_and_feed_carry_placements(url: str) -> None:
    writer = _store(url)
    booted = writer.create_placement(id="feed", name="Feed", reserve_cpm_micros=100)
    reader = _store(url)  # another ad server process
    catalog = Catalog(ScanIndex())
    catalog.load(Snapshot.read(reader))
    assert catalog.placements == {"feed": booted}
    assert catalog.position == reader.last_seq()

    feed = ChangeFeed(reader, catalog)
    created = writer.create_placement(id="article", name="Article", house_ad=HOUSE)
    edited = writer.update_placement("feed", {"country_reserves_cpm_micros": {"US": 900}}, 1)
    assert feed.poll_once() == 2
    assert catalog.placements == {"feed": edited, "article": created}
    assert catalog.placements["feed"].reserve_for(["US"]) == 900
    for store in (writer, reader):
        store.engine.dispose()


def test_older_or_repeated_placement_records_are_ignored() -> None:
    catalog = Catalog(ScanIndex())
    v1 = Placement("feed", "Feed", reserve_cpm_micros=1)
    v2 = dataclasses.replace(v1, reserve_cpm_micros=2, version=2)
    assert catalog.apply(ChangeRecord(2, "placement", 1, 2, v2, NOW))
    assert not catalog.apply(ChangeRecord(1, "placement", 1, 1, v1, NOW))
    assert not catalog.apply(ChangeRecord(2, "placement", 1, 2, v2, NOW))
    assert catalog.placements["feed"].reserve_cpm_micros == 2 and catalog.position == 2


def test_quality_orders_retrieval_like_the_total_value() -> None:
    engine = make_engine("sqlite://")
    upgrade(engine)
    store = SqlCampaignStore(engine, FixedClock(NOW))
    catalog = Catalog(ScanIndex())
    store.subscribe(catalog.apply_local)
    ads = []
    for name in ("a", "b"):
        adv = store.create_advertiser(name)
        c = store.create_campaign(
            advertiser_id=adv.id, name=name, objective=Objective.IMPRESSIONS,
            bid_type=BidType.CPM, bid_micros=2_000_000, daily_budget_micros=10**9,
            time_zone="UTC", flight_start=date(2026, 1, 1),
        )
        ads.append(store.create_ad(campaign_id=c.id, landing_url="https://x.test/",
                                   creative_ref="c", format="banner", width=300, height=250))
    assert catalog.index.query({}).ad_ids == [ads[0].id, ads[1].id]  # equal: by id
    store.update_ad(ads[1].id, {"quality_micros": 1})
    assert catalog.index.query({}).ad_ids == [ads[1].id, ads[0].id]
    store.update_ad(ads[1].id, {"quality_micros": -1})
    assert catalog.index.query({}).ad_ids == [ads[0].id, ads[1].id]
    engine.dispose()
