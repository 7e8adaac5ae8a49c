"""Contract suite of the rollup stores: one behaviour over memory, SQLite and PostgreSQL.

Each backend pairs a ledger with its rollup store: MemoryLedger + MemoryRollupStore, and
on SQL a migrated database (its own SQLite file, or its own PostgreSQL schema) with a
SqlLedger, a SqlRollupStore and the campaign store that owns the advertisers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from adfunnel.billing.ledger import Ledger, MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent, Outcome
from adfunnel.billing.rollup_store import MemoryRollupStore, RollupStore, refresh_since
from adfunnel.billing.rollups import HOUR, HourRollup
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.sql_rollups import make_rollup_store
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import FixedClock
from adfunnel.db import make_engine

T0 = datetime(2026, 11, 3, 14, tzinfo=UTC)  # 09:00 in New York
BUDGET = 10**12


@dataclass
class Backend:
    name: str
    ledger: Ledger
    rollups: RollupStore
    campaigns: list[int]  # campaigns[0], campaigns[1] of advertiser A; campaigns[2] of B
    advertisers: list[int]
    engine: Engine | None = None


def _memory() -> Iterator[Backend]:
    ledger = MemoryLedger()
    owners = {1: 100, 2: 100, 3: 200}
    yield Backend("memory", ledger, MemoryRollupStore(ledger, owners.get), [1, 2, 3], [100, 200])


def _sql(name: str, url: str) -> Iterator[Backend]:
    engine = make_engine(url)
    try:
        upgrade(engine)
        store = SqlCampaignStore(engine, FixedClock(T0))
        a, b = store.create_advertiser("A").id, store.create_advertiser("B").id
        cids = [_campaign(store, owner) for owner in (a, a, b)]
        yield Backend(name, SqlLedger(engine), make_rollup_store(engine), cids, [a, b], engine)
    finally:
        engine.dispose()


def _campaign(store: SqlCampaignStore, advertiser_id: int) -> int:
    return store.create_campaign(
        advertiser_id=advertiser_id, name="c", objective="clicks", bid_type="CPM",
        bid_micros=2_000_000, daily_budget_micros=BUDGET, time_zone="America/New_York",
        flight_start=date(2026, 11, 1),
    ).id


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh ledger and rollup store on each backend."""
    if request.param == "memory":
        yield from _memory()
    elif request.param == "sqlite":
        yield from _sql("sqlite", f"sqlite:///{tmp_path / 'rollups.db'}")
    else:
        yield from _sql("postgres", request.getfixturevalue("pg_schema_url"))


def event(imp: str, kind: EventType, at: datetime, cid: int, ad: int = 10,
          placement: str = "feed", charge: int = 0) -> LedgerEvent:
    return LedgerEvent(imp, kind, cid, ad, placement, "CPM", charge, at, at.date())


def bill(b: Backend, imp: str, at: datetime, cid: int, ad: int = 10, placement: str = "feed",
         clicks: bool = False, conversion: bool = False) -> None:
    """An impression charging 2,000 µ, its click a minute later, its conversion (charging
    5,000 µ) two minutes later."""
    rec = b.ledger.record(event(imp, EventType.IMPRESSION, at, cid, ad, placement, 2_000),
                          BUDGET)
    assert rec.outcome is Outcome.BILLED
    if clicks:
        b.ledger.record(event(imp, EventType.CLICK, at + timedelta(minutes=1), cid, ad,
                              placement), BUDGET)
    if conversion:
        b.ledger.record(event(imp, EventType.CONVERSION, at + timedelta(minutes=2), cid, ad,
                              placement, 5_000), BUDGET)


def scenario(b: Backend) -> None:
    c1, c2, c3 = b.campaigns
    m = timedelta(minutes=1)
    for i in range(4):
        bill(b, f"a{i}", T0 + 10 * i * m, c1, clicks=i < 2, conversion=i == 0)
    bill(b, "b0", T0 + 5 * m, c1, ad=11, placement="side")
    bill(b, "b1", T0 + HOUR + 5 * m, c1, ad=11)
    bill(b, "c0", T0 + 59 * m, c2)
    bill(b, "d0", T0 + 30 * m, c3, ad=30)
    for i, reason in enumerate(["crawler", "crawler", "datacenter"]):
        assert b.ledger.record_invalid(event(f"x{i}", EventType.IMPRESSION, T0 + m, c1), reason)
    assert b.ledger.record_invalid(event("x0", EventType.CLICK, T0 + 2 * m, c1), "crawler")


def everything(b: Backend) -> list[HourRollup]:
    return b.rollups.hours(start=T0 - 24 * HOUR, end=T0 + 24 * HOUR,
                           campaign_ids=b.campaigns)


@pytest.mark.slow
def test_refresh_builds_the_rollups_of_the_ledger(backend: Backend) -> None:
    scenario(backend)
    assert everything(backend) == []  # nothing before a refresh
    assert backend.rollups.refresh([T0 + timedelta(minutes=7), T0 + HOUR]) == 2
    c1, c2, c3 = backend.campaigns
    a, b = backend.advertisers
    q = timedelta(minutes=15)  # one row per UTC quarter-hour (local hours and days exact)
    assert everything(backend) == [
        HourRollup(T0, a, c1, 10, "feed", 2, 2, 1, 4_000 + 5_000, 0,
                   {"crawler": 3, "datacenter": 1}),
        HourRollup(T0, a, c1, 11, "side", 1, 0, 0, 2_000, 0),
        HourRollup(T0 + q, a, c1, 10, "feed", 1, 0, 0, 2_000, 0),
        HourRollup(T0 + 2 * q, a, c1, 10, "feed", 1, 0, 0, 2_000, 0),
        HourRollup(T0 + 2 * q, b, c3, 30, "feed", 1, 0, 0, 2_000, 0),
        HourRollup(T0 + 3 * q, a, c2, 10, "feed", 1, 0, 0, 2_000, 0),
        HourRollup(T0 + HOUR, a, c1, 11, "feed", 1, 0, 0, 2_000, 0),
    ]


@pytest.mark.slow
def test_refresh_twice_and_redelivered_events_change_nothing(backend: Backend) -> None:
    scenario(backend)
    hours = [T0, T0 + HOUR]
    backend.rollups.refresh(hours)
    first = everything(backend)
    backend.rollups.refresh(hours)
    assert everything(backend) == first
    scenario_again = [  # every event delivered again: the ledger keeps one row each
        backend.ledger.record(event("a0", EventType.IMPRESSION, T0, backend.campaigns[0],
                                    charge=2_000), BUDGET),
        backend.ledger.record(event("a0", EventType.CONVERSION, T0, backend.campaigns[0],
                                    charge=5_000), BUDGET),
    ]
    assert {r.outcome for r in scenario_again} == {Outcome.DUPLICATE}
    assert not backend.ledger.record_invalid(
        event("x1", EventType.IMPRESSION, T0, backend.campaigns[0]), "crawler")
    backend.rollups.refresh(hours)
    backend.rollups.refresh(hours[:1])
    assert everything(backend) == first


@pytest.mark.slow
def test_refresh_replaces_only_the_hours_it_is_given(backend: Backend) -> None:
    scenario(backend)
    backend.rollups.refresh([T0, T0 + HOUR])
    before = everything(backend)
    c1 = backend.campaigns[0]
    bill(backend, "late0", T0 + HOUR + timedelta(minutes=50), c1, ad=11)  # late event
    bill(backend, "late1", T0 + 2 * HOUR, c1)  # an hour not refreshed
    assert everything(backend) == before
    backend.rollups.refresh([T0 + HOUR + timedelta(minutes=59)])
    after = everything(backend)
    assert after[:7] == before
    assert (after[7].hour, after[7].impressions) == (T0 + HOUR + timedelta(minutes=45), 1)
    assert len(after) == 8
    assert backend.rollups.refresh([]) == 0
    assert refresh_since(backend.rollups, T0 - 30 * HOUR, T0 + 3 * HOUR) == 34
    assert len(everything(backend)) == 9


@pytest.mark.slow
def test_query_scopes_granularities_and_groups(backend: Backend) -> None:
    scenario(backend)
    refresh_since(backend.rollups, T0, T0 + HOUR)
    c1, c2, c3 = backend.campaigns
    a, b = backend.advertisers
    span = {"start": T0 - 24 * HOUR, "end": T0 + 24 * HOUR}
    rows = backend.rollups.query(**span, advertiser_id=a, granularity="day",
                                 group_by="campaign", time_zone="America/New_York")
    assert [(r.period_start.isoformat(), r.campaign_id, r.impressions) for r in rows] == [
        ("2026-11-03T00:00:00-05:00", c1, 6), ("2026-11-03T00:00:00-05:00", c2, 1)]
    first = rows[0]
    assert (first.clicks, first.conversions, first.billed_micros) == (2, 1, 17_000)
    assert first.ivt == {"crawler": 3, "datacenter": 1}
    assert first.ecpm_micros == 17_000 * 1000 // 6
    assert first.cost_per_conversion_micros == 17_000 and first.ctr == pytest.approx(2 / 6)

    by_ad = backend.rollups.query(**span, campaign_ids=[c1], granularity="hour",
                                  group_by="ad")
    assert [(r.period_start, r.ad_id, r.impressions) for r in by_ad] == [
        (T0, 10, 4), (T0, 11, 1), (T0 + HOUR, 11, 1)]
    by_placement = backend.rollups.query(**span, campaign_ids=[c1, c3], granularity="day",
                                         group_by="placement")
    assert [(r.placement, r.impressions) for r in by_placement] == [("feed", 6), ("side", 1)]
    assert backend.rollups.query(**span, advertiser_id=b)[0].campaign_id == c3
    assert backend.rollups.query(**span, campaign_ids=[]) == []
    narrow = backend.rollups.query(start=T0 + HOUR, end=T0 + 2 * HOUR, campaign_ids=[c1])
    assert [r.impressions for r in narrow] == [1]
    with pytest.raises(ValueError):
        backend.rollups.query(**span)  # no scope
    with pytest.raises(ValueError):
        backend.rollups.query(**span, campaign_ids=[c1], group_by="country")  # type: ignore[arg-type]


@pytest.mark.slow
def test_concurrent_refreshes_of_the_same_hours(backend: Backend) -> None:
    scenario(backend)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for j in range(5):
                bill(backend, f"t{k}-{j}", T0 + timedelta(minutes=k * 5 + j), backend.campaigns[1])
                backend.rollups.refresh([T0, T0 + HOUR])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    backend.rollups.refresh([T0])
    c2 = [r for r in everything(backend) if r.campaign_id == backend.campaigns[1]]
    # minutes 0-19 of T0 (15 + 5 per quarter-hour) and c0 at minute 59
    assert [r.impressions for r in c2] == [15, 5, 1]


def test_render_and_viewable_rows_count_once_never_bill_and_ivt_ones_stay_out(
        backend: Backend) -> None:
    """Render and viewable ledger rows (measurement): recorded once, never billed, never
    counted as impressions; counted in ``rendered``/``viewable`` per ad, campaign and
    placement; invalid ones counted neither as valid nor again in ``ivt`` (their
    impression is)."""
    c1, _, _ = backend.campaigns
    m = timedelta(minutes=1)
    for i in range(3):
        rec = backend.ledger.record(event(f"r{i}", EventType.RENDER, T0 + i * m, c1), BUDGET)
        assert rec.outcome is Outcome.MEASURED and rec.billed_micros == 0
    assert backend.ledger.record(event("r0", EventType.RENDER, T0 + 5 * m, c1),
                                 BUDGET).outcome is Outcome.DUPLICATE
    assert backend.ledger.record(event("r0", EventType.VIEWABLE, T0 + 2 * m, c1, 10, "feed",
                                       2_000), BUDGET).outcome is Outcome.MEASURED
    bill(backend, "r0", T0 + 2 * m, c1)
    assert backend.ledger.record_invalid(event("x0", EventType.RENDER, T0 + m, c1), "crawler")
    assert backend.ledger.record_invalid(event("x0", EventType.VIEWABLE, T0 + m, c1),
                                         "crawler")
    backend.rollups.refresh([T0])
    stats = backend.ledger.stats()  # billing rows and duplicates apart from measurement
    assert (stats.rows, stats.measured_rows, stats.duplicates_rejected) == (1, 4, 0)
    assert backend.ledger.counters()["duplicates_measured"] == 1
    [row] = everything(backend)
    assert (row.impressions, row.rendered, row.viewable, row.billed_micros) == (1, 3, 1, 2_000)
    assert row.ivt == {}
    [by_ad] = backend.rollups.query(start=T0, end=T0 + HOUR, campaign_ids=[c1],
                                    granularity="day", group_by="ad")
    assert (by_ad.ad_id, by_ad.rendered, by_ad.viewable) == (10, 3, 1)
    assert by_ad.viewability_rate == pytest.approx(1 / 3)
    backend.ledger.record(event("s0", EventType.RENDER, T0 + m, c1, 10, "side"), BUDGET)
    backend.rollups.refresh([T0])
    [feed] = backend.rollups.query(start=T0, end=T0 + HOUR, placement="feed",
                                   granularity="day", group_by="placement")
    assert (feed.placement, feed.rendered, feed.viewable, feed.impressions) == ("feed", 3, 1, 1)
    totals = backend.ledger.day_totals(c1, T0.date(), T0.date())
    assert [(t.impressions, t.clicks, t.conversions, t.billed_micros) for t in totals] == [
        (1, 0, 0, 2_000)]
