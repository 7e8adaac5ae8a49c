"""The CampaignStore contract, run on SQLite (in memory, a file) and PostgreSQL.

Rules under test: every write bumps the record's version by one and appends one
change-log row carrying the whole new record, in the same transaction; a stale
expected version is refused and changes nothing; targeting text and landing URLs
round-trip byte for byte; flight dates are local dates and never shift; the change
log reads back in commit order and rebuilds every record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, func, select

from adfunnel.campaigns import codec
from adfunnel.campaigns.errors import AlreadyExists, InvalidChange, NotFound, VersionConflict
from adfunnel.campaigns.migrate import alembic_config, current_revision, upgrade
from adfunnel.campaigns.model import (
    Ad,
    Advertiser,
    AuctionType,
    BidStrategy,
    BidType,
    Campaign,
    CampaignStatus,
    CapLevel,
    CapWindow,
    ChangeRecord,
    Daypart,
    FrequencyCap,
    HouseAd,
    Objective,
    Placement,
    ReviewState,
)
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.campaigns.tables import change_log
from adfunnel.clock import FixedClock
from adfunnel.db import make_engine
from adfunnel.targeting import dump_expr

NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)
URL = "https://x.test/p?a=1&b=2&c=%20"
TARGETING = dump_expr(
    {
        "all": [
            {"attr": "geo.country", "in": ["US", "CA"]},
            {"not": {"attr": "interests", "in": ["gambling", "ü-ñ"]}},
        ]
    }
)


@dataclass
class StoreBackend:
    """A migrated database; ``open()`` gives another store on it (as another process would)."""

    name: str
    open: Callable[[], SqlCampaignStore]
    engines: list[Engine] = field(default_factory=list)


def _url_backend(name: str, url: str) -> Iterator[StoreBackend]:
    upgrade(url)
    engines: list[Engine] = []

    def open_store() -> SqlCampaignStore:
        engines.append(make_engine(url))
        return SqlCampaignStore(engines[-1], FixedClock(NOW))

    try:
        yield StoreBackend(name, open_store, engines)
    finally:
        for engine in engines:
            engine.dispose()


def _memory_backend() -> Iterator[StoreBackend]:
    engine = make_engine("sqlite://")
    upgrade(engine)
    try:
        yield StoreBackend(
            "sqlite-memory", lambda: SqlCampaignStore(engine, FixedClock(NOW)), [engine]
        )
    finally:
        engine.dispose()


@pytest.fixture(
    params=["sqlite-memory", "sqlite-file", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def backend(request: pytest.FixtureRequest) -> Iterator[StoreBackend]:
    """A fresh migrated database on each backend (its own schema on PostgreSQL)."""
    if request.param == "sqlite-memory":
        yield from _memory_backend()
    elif request.param == "sqlite-file":
        yield from _url_backend("sqlite-file", request.getfixturevalue("sqlite_file_url"))
    else:
        yield from _url_backend("postgres", request.getfixturevalue("pg_schema_url"))


@pytest.fixture
def store(backend: StoreBackend) -> SqlCampaignStore:
    return backend.open()


def new_campaign(store: SqlCampaignStore, advertiser_id: int, **over: object) -> Campaign:
    values: dict[str, object] = {
        "advertiser_id": advertiser_id,
        "name": "Fall sale",
        "objective": Objective.CLICKS,
        "bid_type": BidType.CPC,
        "bid_micros": 1_500_000,
        "daily_budget_micros": 50_000_000,
        "time_zone": "America/New_York",
        "flight_start": date(2026, 11, 1),
        "flight_end": date(2026, 11, 30),
        "dayparts": (Daypart((0, 1, 2, 3, 4), 8, 20),),
        "frequency_caps": (FrequencyCap(3, CapWindow.DAY, CapLevel.CAMPAIGN),),
        "targeting": TARGETING,
    }
    values.update(over)
    return store.create_campaign(**values)  # type: ignore[arg-type]


def new_ad(store: SqlCampaignStore, campaign_id: int, url: str = URL) -> Ad:
    return store.create_ad(
        campaign_id=campaign_id,
        landing_url=url,
        creative_ref="cr-1",
        format="banner",
        width=300,
        height=250,
    )


def log_count(store: SqlCampaignStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(change_log)).scalar_one())


# --- schema --------------------------------------------------------------------------


@pytest.mark.slow
def test_migration_is_at_head_and_idempotent(backend: StoreBackend) -> None:
    store = backend.open()
    upgrade(store.engine)  # a second upgrade is a no-op
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert current_revision(store.engine) == head


# --- versions and the change log --------------------------------------------------------


@pytest.mark.slow
def test_every_write_bumps_version_and_appends_one_change(store: SqlCampaignStore) -> None:
    adv = store.create_advertiser("Acme")
    assert adv.version == 1
    camp = new_campaign(store, adv.id)
    ad = new_ad(store, camp.id)
    assert (camp.version, ad.version) == (1, 1)
    assert log_count(store) == 3

    v2 = store.update_campaign(camp.id, {"status": CampaignStatus.PAUSED}, expected_version=1)
    v3 = store.update_campaign(camp.id, {"daily_budget_micros": 7}, expected_version=None)
    ad2 = store.update_ad(ad.id, {"review_state": "rejected"}, expected_version=1)
    assert (v2.version, v3.version, ad2.version) == (2, 3, 2)
    assert v3.status is CampaignStatus.PAUSED and v3.daily_budget_micros == 7
    assert ad2.review_state is ReviewState.REJECTED
    assert store.get_campaign(camp.id) == v3
    assert store.get_ad(ad.id) == ad2
    assert log_count(store) == 6

    changes = store.changes_since(0)
    assert [(c.entity, c.entity_id, c.version) for c in changes] == [
        ("advertiser", adv.id, 1),
        ("campaign", camp.id, 1),
        ("ad", ad.id, 1),
        ("campaign", camp.id, 2),
        ("campaign", camp.id, 3),
        ("ad", ad.id, 2),
    ]
    assert changes[-2].record == v3  # the whole new record rides along
    assert changes[-1].record == ad2
    assert all(c.committed_at == NOW for c in changes)


@pytest.mark.slow
def test_stale_version_conflicts_and_changes_nothing(store: SqlCampaignStore) -> None:
    camp = new_campaign(store, store.create_advertiser("Acme").id)
    store.update_campaign(camp.id, {"name": "first"}, expected_version=1)
    before = log_count(store)
    with pytest.raises(VersionConflict) as err:
        store.update_campaign(camp.id, {"name": "second"}, expected_version=1)
    assert (err.value.expected, err.value.current) == (1, 2)
    got = store.get_campaign(camp.id)
    assert (got.name, got.version) == ("first", 2)
    assert log_count(store) == before

    ad = new_ad(store, camp.id)
    with pytest.raises(VersionConflict):
        store.update_ad(ad.id, {"width": 1}, expected_version=5)
    assert store.get_ad(ad.id) == ad


@pytest.mark.slow
def test_missing_records_raise_not_found(store: SqlCampaignStore) -> None:
    for call in (
        lambda: store.get_advertiser(99),
        lambda: store.get_campaign(99),
        lambda: store.get_ad(99),
        lambda: store.update_campaign(99, {"name": "x"}),
        lambda: store.update_ad(99, {"width": 5}),
        lambda: new_campaign(store, 99),
        lambda: new_ad(store, 99),
    ):
        with pytest.raises(NotFound):
            call()
    assert log_count(store) == 0


@pytest.mark.slow
def test_invalid_values_are_refused_without_a_write(store: SqlCampaignStore) -> None:
    adv = store.create_advertiser("Acme")
    camp = new_campaign(store, adv.id)
    before = log_count(store)
    bad_updates: list[tuple[dict[str, object], str]] = [
        ({"daily_budget_micros": -1}, "daily_budget_micros"),
        ({"bid_micros": 0}, "bid_micros"),
        ({"bid_micros": 1.5}, "bid_micros"),
        ({"time_zone": "Mars/Olympus"}, "time_zone"),
        ({"flight_end": date(2026, 10, 31)}, "flight_end"),
        ({"status": "sleeping"}, "status"),
        ({"id": 5}, "id"),
        ({"advertiser_id": 5}, "advertiser_id"),
        ({"colour": "red"}, "colour"),
    ]
    for changes, field_name in bad_updates:
        with pytest.raises(InvalidChange) as err:
            store.update_campaign(camp.id, changes, expected_version=None)
        assert err.value.field == field_name
    for url in ("javascript:alert(1)", "data:text/html,hi", "ftp://x.test/", "/relative"):
        with pytest.raises(InvalidChange):
            new_ad(store, camp.id, url)
    assert log_count(store) == before
    assert store.get_campaign(camp.id) == camp


# --- round trips ----------------------------------------------------------------------


@pytest.mark.slow
def test_targeting_and_url_round_trip_byte_identical(backend: StoreBackend) -> None:
    store = backend.open()
    camp = new_campaign(store, store.create_advertiser("Acme").id)
    ad = new_ad(store, camp.id)
    other = backend.open()  # another process reading the same database
    read_c, read_a = other.get_campaign(camp.id), other.get_ad(ad.id)
    assert read_c.targeting == TARGETING
    assert read_a.landing_url == URL
    # Saving what was read produces the same bytes again.
    again_c = other.update_campaign(camp.id, {"targeting": read_c.targeting}, read_c.version)
    again_a = other.update_ad(ad.id, {"landing_url": read_a.landing_url}, read_a.version)
    assert store.get_campaign(camp.id).targeting == again_c.targeting == TARGETING
    assert store.get_ad(ad.id).landing_url == again_a.landing_url == URL
    assert store.changes_since(0)[-1].record.landing_url == URL  # type: ignore[union-attr]


@pytest.mark.slow
def test_flight_dates_are_local_dates(store: SqlCampaignStore) -> None:
    camp = new_campaign(
        store,
        store.create_advertiser("Acme").id,
        time_zone="America/New_York",
        flight_start=date(2026, 11, 1),
        flight_end=None,
    )
    got = store.get_campaign(camp.id)
    assert got.flight_start == date(2026, 11, 1)
    assert got.flight_end is None
    assert store.changes_since(0)[-1].record.flight_start == date(2026, 11, 1)  # type: ignore[union-attr]


@pytest.mark.slow
def test_every_field_round_trips(store: SqlCampaignStore) -> None:
    adv = store.create_advertiser("Ünïcode Ads")
    camp = new_campaign(
        store,
        adv.id,
        objective="conversions",
        bid_type="CPA",
        lifetime_budget_micros=900_000_000,
        pacing_mode="accelerated",
        status="paused",
        dayparts=({"weekdays": [5, 6], "start_hour": 0, "end_hour": 24},),
    )
    assert store.get_campaign(camp.id) == camp
    assert camp.dayparts == (Daypart((5, 6), 0, 24),)
    assert store.get_advertiser(adv.id) == adv
    assert codec.from_payload("campaign", codec.dumps_payload(camp)) == camp


# --- reading the log -----------------------------------------------------------------


@pytest.mark.slow
def test_changes_since_orders_pages_and_rebuilds(store: SqlCampaignStore) -> None:
    adv = store.create_advertiser("Acme")
    camps = [new_campaign(store, adv.id, name=f"c{i}") for i in range(5)]
    for c in camps[::2]:
        store.update_campaign(c.id, {"bid_micros": 2_000_000}, c.version)

    everything = store.changes_since(0, limit=1000)
    seqs = [c.seq for c in everything]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) == 9

    paged: list[ChangeRecord] = []
    pos = 0
    while page := store.changes_since(pos, limit=2):
        assert len(page) <= 2
        paged += page
        pos = page[-1].seq
    assert paged == everything
    assert store.changes_since(seqs[3]) == everything[4:]
    assert store.changes_since(seqs[-1]) == []

    # A consumer applying records newer than what it holds ends equal to the store.
    held: dict[tuple[str, int], Advertiser | Campaign | Ad] = {}
    for change in everything:
        key = (change.entity, change.entity_id)
        if key not in held or held[key].version < change.version:
            held[key] = change.record
    assert held[("campaign", camps[0].id)] == store.get_campaign(camps[0].id)
    assert sorted(r.id for (e, _), r in held.items() if e == "campaign") == [c.id for c in camps]

    with pytest.raises(ValueError):
        store.changes_since(0, limit=0)


@pytest.mark.slow
def test_snapshot_then_replay_reaches_the_present(store: SqlCampaignStore) -> None:
    adv = store.create_advertiser("Acme")
    c1 = new_campaign(store, adv.id)
    new_ad(store, c1.id)
    advertisers, campaigns, ads, last = store.snapshot()
    assert [a.id for a in advertisers] == [adv.id]
    assert campaigns == [c1] and len(ads) == 1
    assert last == store.changes_since(0)[-1].seq

    c2 = store.update_campaign(c1.id, {"status": "paused"}, 1)
    later = store.changes_since(last)
    assert [c.record for c in later] == [c2]


@pytest.mark.slow
def test_lists_filter_and_order(store: SqlCampaignStore) -> None:
    a, b = store.create_advertiser("A"), store.create_advertiser("B")
    ca = [new_campaign(store, a.id, name=f"a{i}") for i in range(3)]
    cb = new_campaign(store, b.id)
    assert store.list_advertisers() == [a, b]
    assert store.list_campaigns(a.id) == ca
    assert store.list_campaigns() == [*ca, cb]
    ads = [new_ad(store, ca[0].id) for _ in range(2)]
    assert store.list_ads(ca[0].id) == ads
    assert store.list_ads(cb.id) == []


@pytest.mark.slow
def test_subscribers_get_each_commit_and_not_failures(store: SqlCampaignStore) -> None:
    seen: list[ChangeRecord] = []
    unsubscribe = store.subscribe(seen.append)
    store.subscribe(lambda _c: (_ for _ in ()).throw(RuntimeError("broken consumer")))
    adv = store.create_advertiser("Acme")
    camp = new_campaign(store, adv.id)
    with pytest.raises(VersionConflict):
        store.update_campaign(camp.id, {"name": "x"}, expected_version=9)
    store.update_campaign(camp.id, {"name": "y"}, expected_version=1)
    assert [(c.entity, c.version) for c in seen] == [
        ("advertiser", 1),
        ("campaign", 1),
        ("campaign", 2),
    ]
    assert seen == store.changes_since(0)
    unsubscribe()
    store.create_advertiser("B")
    assert len(seen) == 3


@pytest.mark.slow
def test_concurrent_writers_lose_no_update(backend: StoreBackend) -> None:
    first = backend.open()
    camp = new_campaign(first, first.create_advertiser("Acme").id)
    stores = [backend.open() for _ in range(4)] if backend.name != "sqlite-memory" else [first] * 4
    conflicts = [0]
    lock = threading.Lock()

    def writer(s: SqlCampaignStore) -> None:
        for _ in range(10):
            s.update_campaign(camp.id, {"daily_budget_micros": 1}, expected_version=None)
            current = s.get_campaign(camp.id)
            try:
                s.update_campaign(camp.id, {"name": "n"}, expected_version=current.version)
            except VersionConflict:
                with lock:
                    conflicts[0] += 1

    threads = [threading.Thread(target=writer, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = first.get_campaign(camp.id)
    writes = 1 + 40 + (40 - conflicts[0])
    assert final.version == writes
    log = [c for c in first.changes_since(0, limit=1000) if c.entity == "campaign"]
    assert [c.version for c in log] == list(range(1, writes + 1))  # seq order = commit order


# --- placements and ad quality (operator settings) ------------------------------------

HOUSE = HouseAd("house/feed.png", "https://operator.test/app?x=1%202", "banner", 300, 250)


def new_placement(
    store: SqlCampaignStore, placement_id: str = "feed-top", **over: object
) -> Placement:
    values: dict[str, object] = {
        "id": placement_id,
        "name": "Feed, top",
        "reserve_cpm_micros": 500_000,
        "country_reserves_cpm_micros": {"US": 2_000_000, "DE": 1_000_000},
        "allowed_sizes": ("300x250", "728x90"),
        "allowed_formats": ("banner",),
        "house_ad": HOUSE,
    }
    values.update(over)
    return store.create_placement(**values)  # type: ignore[arg-type]


@pytest.mark.slow
def test_placement_writes_bump_version_and_log_the_whole_record(store: SqlCampaignStore) -> None:
    p1 = new_placement(store)
    assert p1.version == 1 and p1.country_reserves_cpm_micros == {"DE": 1_000_000, "US": 2_000_000}
    assert store.get_placement("feed-top") == p1
    p2 = store.update_placement("feed-top", {"reserve_cpm_micros": 700_000}, expected_version=1)
    p3 = store.update_placement("feed-top", {"house_ad": None}, expected_version=None)
    assert (p2.version, p3.version) == (2, 3)
    assert p3.house_ad is None and p3.reserve_cpm_micros == 700_000
    assert store.get_placement("feed-top") == p3

    changes = store.changes_since(0)
    assert [(c.entity, c.version) for c in changes] == [("placement", v) for v in (1, 2, 3)]
    assert [c.record for c in changes] == [p1, p2, p3]
    assert len({c.entity_id for c in changes}) == 1  # one placement, one log key

    before = log_count(store)
    with pytest.raises(VersionConflict) as err:
        store.update_placement("feed-top", {"name": "late"}, expected_version=2)
    assert (err.value.expected, err.value.current) == (2, 3)
    assert store.get_placement("feed-top") == p3 and log_count(store) == before


@pytest.mark.slow
def test_placement_id_is_unique_and_chosen_by_the_operator(backend: StoreBackend) -> None:
    store = backend.open()
    first = new_placement(store, "feed-top")
    with pytest.raises(AlreadyExists):
        new_placement(backend.open(), "feed-top", name="another")
    assert log_count(store) == 1
    second = new_placement(store, "article.end:2", house_ad=None, allowed_sizes=())
    other = backend.open()  # another process
    assert other.list_placements() == [first, second]  # in creation order
    assert other.get_placement("feed-top") == first


@pytest.mark.slow
def test_missing_placements_raise_not_found(store: SqlCampaignStore) -> None:
    for call in (
        lambda: store.get_placement("nope"),
        lambda: store.get_placement("bad/id"),
        lambda: store.update_placement("nope", {"name": "x"}),
    ):
        with pytest.raises(NotFound):
            call()
    assert log_count(store) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("over", "field_name"),
    [
        ({"id": "feed/top"}, "id"),
        ({"id": ""}, "id"),
        ({"id": "x" * 201}, "id"),
        ({"name": " "}, "name"),
        ({"reserve_cpm_micros": -1}, "reserve_cpm_micros"),
        ({"reserve_cpm_micros": 1.5}, "reserve_cpm_micros"),
        ({"reserve_cpm_micros": 10**12 + 1}, "reserve_cpm_micros"),
        ({"country_reserves_cpm_micros": {"UK": 1}}, "country_reserves_cpm_micros.UK"),
        ({"country_reserves_cpm_micros": {"us": 1}}, "country_reserves_cpm_micros.us"),
        ({"country_reserves_cpm_micros": {"USA": 1}}, "country_reserves_cpm_micros.USA"),
        ({"country_reserves_cpm_micros": {"FR": -5}}, "country_reserves_cpm_micros.FR"),
        ({"allowed_sizes": ("300x",)}, "allowed_sizes[0]"),
        ({"allowed_sizes": ("300x250", "0x50")}, "allowed_sizes[1]"),
        ({"allowed_sizes": ("300x250", "300x250")}, "allowed_sizes"),
        ({"allowed_formats": ("",)}, "allowed_formats[0]"),
        ({"allowed_sizes": ("728x90",)}, "house_ad"),
        ({"allowed_formats": ("native",)}, "house_ad.format"),
        ({"house_ad": HouseAd("h", "javascript:alert(1)", "banner", 300, 250)},
         "house_ad.landing_url"),
        ({"house_ad": HouseAd("h", "https://o.test/", "banner", 0, 250)}, "house_ad.width"),
        ({"house_ad": {"creative_ref": "h"}}, "house_ad"),
    ],
)
def test_invalid_placements_are_refused_without_a_write(
    store: SqlCampaignStore, over: dict[str, object], field_name: str
) -> None:
    with pytest.raises(InvalidChange) as err:
        new_placement(store, **over)
    assert err.value.field == field_name
    assert log_count(store) == 0


@pytest.mark.slow
def test_invalid_placement_updates_change_nothing(store: SqlCampaignStore) -> None:
    p = new_placement(store)
    for changes, field_name in [
        ({"id": "other"}, "id"),
        ({"colour": "red"}, "colour"),
        ({"allowed_sizes": ("728x90",)}, "house_ad"),  # would strand the house ad
        ({"country_reserves_cpm_micros": {"ZZ": 1}}, "country_reserves_cpm_micros.ZZ"),
    ]:
        with pytest.raises(InvalidChange) as err:
            store.update_placement(p.id, changes, expected_version=1)
        assert err.value.field == field_name
    assert store.get_placement(p.id) == p and log_count(store) == 1


@pytest.mark.slow
def test_placement_round_trips_through_payload_and_snapshot(store: SqlCampaignStore) -> None:
    p = new_placement(store, name="Ünïcode feed", house_ad=HouseAd(
        "h/ü.png", "https://bücher.example/straße?q=größe", "banner", 728, 90))
    assert codec.from_payload("placement", codec.dumps_payload(p)) == p
    assert store.changes_since(0)[-1].record == p
    advertisers, campaigns, ads, last = store.snapshot()  # the advertiser side only
    assert (advertisers, campaigns, ads) == ([], [], []) and last == 1
    assert store.list_placements() == [p]


@pytest.mark.slow
def test_ad_quality_is_stored_signed_and_bounded(store: SqlCampaignStore) -> None:
    camp = new_campaign(store, store.create_advertiser("Acme").id)
    ad = new_ad(store, camp.id)
    assert ad.quality_micros == 0
    worse = store.update_ad(ad.id, {"quality_micros": -1_000}, expected_version=1)
    assert store.get_ad(ad.id) == worse and worse.quality_micros == -1_000
    assert store.changes_since(0)[-1].record == worse
    better = store.create_ad(campaign_id=camp.id, landing_url=URL, creative_ref="c",
                             format="banner", width=1, height=1, quality_micros=2_000)
    assert store.get_ad(better.id).quality_micros == 2_000
    before = log_count(store)
    for bad in (10**9 + 1, -(10**9) - 1, 0.5, True, "3"):
        with pytest.raises(InvalidChange) as err:
            store.update_ad(ad.id, {"quality_micros": bad})
        assert err.value.field == "quality_micros"
    assert log_count(store) == before and store.get_ad(ad.id) == worse


@pytest.mark.slow
def test_bid_strategy_terms_round_trip(store: SqlCampaignStore) -> None:
    """#27: a strategy, its target and the instant its terms changed come back equal from
    the table, the change log and a payload, on every backend; a placement's auction
    type too. Red when the codec leaves ``bid_strategy_since`` naive (SQLite drops the
    offset) or the table lacks a column."""
    adv = store.create_advertiser("a")
    since = datetime(2026, 11, 3, 15, 30, 1, 250_000, tzinfo=UTC)
    camp = new_campaign(store, adv.id, objective="conversions", bid_type="CPA",
                        bid_micros=20_000_000, bid_strategy="target_cpa",
                        target_cpa_micros=20_000_000, bid_strategy_since=since)
    assert camp.bid_strategy is BidStrategy.TARGET_CPA
    assert store.get_campaign(camp.id) == camp
    assert store.get_campaign(camp.id).bid_strategy_since == since
    assert store.changes_since(0)[-1].record == camp
    assert codec.from_payload("campaign", codec.dumps_payload(camp)) == camp
    with pytest.raises(InvalidChange) as err:  # the store keeps the derived bid
        store.update_campaign(camp.id, {"bid_micros": 1})
    assert err.value.field == "bid_micros"
    capped = store.update_campaign(camp.id, {
        "bid_strategy": "max_clicks", "bid_type": "CPC", "objective": "clicks",
        "target_cpa_micros": None, "bid_cap_micros": 2_000_000, "bid_micros": 2_000_000})
    assert store.get_campaign(camp.id) == capped
    p = new_placement(store, auction_type="first_price")
    assert p.auction_type is AuctionType.FIRST_PRICE
    assert store.get_placement(p.id) == p
    assert codec.from_payload("placement", codec.dumps_payload(p)) == p
