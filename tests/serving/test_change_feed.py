"""The change stream: every process's catalog follows the change log (PostgreSQL and SQLite)."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, date, datetime

import pytest

from adfunnel.campaigns.model import BidType, CampaignStatus, ChangeRecord, Objective
from adfunnel.clock import SystemClock
from adfunnel.index import ScanIndex
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.serving.catalog import Catalog
from adfunnel.settings import load_settings


def _runtime(url: str) -> Runtime:
    settings = load_settings(database_url=url, token_secret="k" * 32, change_poll_s=0.2)
    return build_runtime(settings, SystemClock())


def _campaign(rt: Runtime) -> int:
    adv = rt.store.create_advertiser("a")
    c = rt.store.create_campaign(
        advertiser_id=adv.id, name="c", objective=Objective.IMPRESSIONS, bid_type=BidType.CPM,
        bid_micros=1_000_000, daily_budget_micros=10_000_000, time_zone="UTC",
        flight_start=date(2026, 1, 1),
    )
    return c.id


def _wait(pred, timeout_s: float = 2.0) -> float:
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout_s, "change did not arrive in time"
        time.sleep(0.01)
    return time.monotonic() - t0


@pytest.fixture(params=["postgres", "sqlite"])
def two_processes(request: pytest.FixtureRequest, tmp_path):
    if request.param == "postgres":
        url = request.getfixturevalue("pg_schema_url")
    else:
        url = f"sqlite:///{tmp_path / 'shared.sqlite3'}"
    a, b = _runtime(url), _runtime(url)
    yield a, b
    a.close()
    b.close()


@pytest.mark.slow
def test_write_in_one_process_reaches_the_other_within_a_second(two_processes) -> None:
    a, b = two_processes
    cid = _campaign(a)
    assert cid in a.catalog.campaigns  # the writer applies its own change at once
    assert _wait(lambda: cid in b.catalog.campaigns) < 1.0
    a.store.update_campaign(cid, {"status": CampaignStatus.PAUSED})
    assert _wait(lambda: b.catalog.campaigns[cid].status is CampaignStatus.PAUSED) < 1.0
    assert b.ready()


@pytest.mark.slow
def test_readiness_fails_when_behind(two_processes) -> None:
    _, b = two_processes
    b.feed.stop()
    b.feed.caught_up_at -= 6.0
    assert not b.ready()


def test_duplicate_and_out_of_order_records_are_harmless() -> None:
    from adfunnel.campaigns.model import Campaign

    catalog = Catalog(ScanIndex())
    base = Campaign(1, 1, "c", Objective.CLICKS, BidType.CPC, 1, 100, "UTC", date(2026, 1, 1))
    now = datetime.now(UTC)
    v1 = ChangeRecord(1, "campaign", 1, 1, base, now)
    v2 = ChangeRecord(2, "campaign", 1, 2, dataclasses.replace(base, version=2, name="new"), now)
    assert catalog.apply(v2)
    assert not catalog.apply(v1)  # older version arrives late: ignored
    assert not catalog.apply(v2)  # duplicate: ignored
    assert catalog.campaigns[1].name == "new" and catalog.position == 2


def test_local_apply_does_not_advance_position() -> None:
    from adfunnel.campaigns.model import Campaign

    catalog = Catalog(ScanIndex())
    c = Campaign(1, 1, "c", Objective.CLICKS, BidType.CPC, 1, 100, "UTC", date(2026, 1, 1))
    catalog.apply_local(ChangeRecord(9, "campaign", 1, 1, c, datetime.now(UTC)))
    assert catalog.position == 0 and 1 in catalog.campaigns


@pytest.mark.slow
def test_a_new_process_boots_from_the_snapshot(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'boot.sqlite3'}"
    first = _runtime(url)
    cid = _campaign(first)
    ad = first.store.create_ad(campaign_id=cid, landing_url="https://x.test/", creative_ref="c",
                               format="banner", width=300, height=250)
    first.close()
    second = _runtime(url)
    try:
        assert second.catalog.campaigns[cid].id == cid
        assert second.catalog.index.query({}).ad_ids == [ad.id]
        assert second.catalog.position == second.store.last_seq()
    finally:
        second.close()
