"""The hand-written migration equals the tables declared on ``adfunnel.db.metadata``."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

import adfunnel.api.idempotency_tables
import adfunnel.billing.rollup_tables
import adfunnel.billing.tables
import adfunnel.budget.multiplier_tables
import adfunnel.campaigns.tables
import adfunnel.campaigns.uploads
import adfunnel.forecast.tables
import adfunnel.pacing.traffic_tables
import adfunnel.serving.placement_tables  # noqa: F401  (registers the tables)
from adfunnel.campaigns.migrate import MIGRATIONS_DIR, alembic_config, current_revision, upgrade
from adfunnel.db import make_engine, metadata


def _diff(engine_url: str) -> list[object]:
    engine = make_engine(engine_url)
    try:
        upgrade(engine)
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, metadata))
    finally:
        engine.dispose()


def test_sqlite_schema_matches_metadata(tmp_path: Path) -> None:
    assert _diff(f"sqlite:///{tmp_path / 'm.db'}") == []


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_schema_matches_metadata(pg_schema_url: str) -> None:
    assert _diff(pg_schema_url) == []


def _head() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_upgrade_by_url_creates_every_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    upgrade(url)
    engine = make_engine(url)
    try:
        assert set(inspect(engine).get_table_names()) >= set(metadata.tables)
        assert current_revision(engine) == _head()
    finally:
        engine.dispose()


def test_migration_files_ship_with_the_package() -> None:
    names = {p.name for p in MIGRATIONS_DIR.iterdir()}
    assert {"env.py", "script.py.mako"} <= names
    assert (MIGRATIONS_DIR / "versions" / "0001_initial.py").is_file()
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    text = pyproject.read_text()
    for pattern in ("migrations/*.py", "migrations/*.mako", "migrations/versions/*.py"):
        assert f'"{pattern}"' in text


def test_campaigns_from_before_0017_bill_on_render_and_new_ones_on_viewable(
        tmp_path: Path) -> None:
    """Migration 0017 gives existing campaigns ``billable_event = rendered`` (they keep
    today's billing); a campaign created afterwards defaults to ``viewable``."""
    from datetime import date

    from sqlalchemy import text

    from adfunnel.campaigns.model import BillableEvent
    from adfunnel.campaigns.sql_store import SqlCampaignStore

    engine = make_engine(f"sqlite:///{tmp_path / 'v.db'}")
    try:
        upgrade(engine, "0015")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO advertisers (id, name, version, updated_at) "
                              "VALUES (1, 'a', 1, '2026-12-01 00:00:00')"))
            conn.execute(text(
                "INSERT INTO campaigns (id, advertiser_id, name, objective, bid_type, "
                "bid_micros, daily_budget_micros, time_zone, flight_start, dayparts, "
                "status, pacing_mode, frequency_caps, version, updated_at) VALUES "
                "(1, 1, 'old', 'clicks', 'CPM', 2000000, 10000000, 'UTC', '2026-12-01', "
                "'[]', 'active', 'even', '[]', 1, '2026-12-01 00:00:00')"))
        upgrade(engine)
        store = SqlCampaignStore(engine)
        assert store.get_campaign(1).billable_event is BillableEvent.RENDERED
        new = store.create_campaign(
            advertiser_id=1, name="new", objective="clicks", bid_type="CPM",
            bid_micros=2_000_000, daily_budget_micros=10_000_000, time_zone="UTC",
            flight_start=date(2026, 12, 1))
        assert store.get_campaign(new.id).billable_event is BillableEvent.VIEWABLE
        changed = store.update_campaign(1, {"billable_event": "viewable"})
        assert changed.billable_event is BillableEvent.VIEWABLE
    finally:
        engine.dispose()


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_campaigns_from_before_0018_are_auction_lines_by_day(
        db: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Migration 0018 gives existing campaigns priority ``auction``, no goal, budget
    period ``day`` and no flight budget: they keep selling and pacing as before; a
    guaranteed line made afterwards keeps its goal and flight."""
    from datetime import date

    from sqlalchemy import text

    from adfunnel.campaigns.model import BudgetPeriod, Goal, GoalMetric, Priority
    from adfunnel.campaigns.sql_store import SqlCampaignStore

    url = (f"sqlite:///{tmp_path / 's.db'}" if db == "sqlite"
           else request.getfixturevalue("pg_schema_url"))
    engine = make_engine(url)
    try:
        upgrade(engine, "0017")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO advertisers (id, name, version, updated_at) "
                              "VALUES (1, 'a', 1, '2026-12-01 00:00:00')"))
            conn.execute(text(
                "INSERT INTO campaigns (id, advertiser_id, name, objective, bid_type, "
                "bid_micros, daily_budget_micros, time_zone, flight_start, dayparts, "
                "status, pacing_mode, frequency_caps, version, updated_at, billable_event) "
                "VALUES (7, 1, 'old', 'clicks', 'CPM', 2000000, 10000000, 'UTC', "
                "'2026-12-01', '[]', 'active', 'even', '[]', 1, '2026-12-01 00:00:00', "
                "'rendered')"))
        upgrade(engine)
        store = SqlCampaignStore(engine)
        old = store.get_campaign(7)
        assert (old.priority, old.goal, old.budget_period, old.flight_budget_micros) == (
            Priority.AUCTION, None, BudgetPeriod.DAY, None)
        line = store.create_campaign(
            advertiser_id=1, name="line", objective="impressions", bid_type="CPM",
            bid_micros=5_000_000, daily_budget_micros=0, time_zone="UTC",
            flight_start=date(2026, 12, 1), flight_end=date(2026, 12, 28),
            priority="guaranteed", goal={"metric": "impressions", "total": 2_000_000},
            budget_period="flight")
        assert store.get_campaign(line.id).goal == Goal(GoalMetric.IMPRESSIONS, total=2_000_000)
        assert store.update_campaign(7, {"budget_period": "average_day"}).budget_period is (
            BudgetPeriod.AVERAGE_DAY)
    finally:
        engine.dispose()


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_records_from_before_0021_bid_manually_at_second_price(
        db: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Migration 0021 (#27) gives existing campaigns ``manual`` bidding with no cap,
    target or strategy instant, and existing placements ``second_price``: they bid and
    price as before. Red when the migration's server default of ``bid_strategy`` is
    missing (the old row cannot be read)."""
    from sqlalchemy import text

    from adfunnel.campaigns.model import AuctionType, BidStrategy
    from adfunnel.campaigns.sql_store import SqlCampaignStore

    url = (f"sqlite:///{tmp_path / 'b.db'}" if db == "sqlite"
           else request.getfixturevalue("pg_schema_url"))
    engine = make_engine(url)
    try:
        upgrade(engine, "0020")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO advertisers (id, name, version, updated_at) "
                              "VALUES (1, 'a', 1, '2026-12-01 00:00:00')"))
            conn.execute(text(
                "INSERT INTO campaigns (id, advertiser_id, name, objective, bid_type, "
                "bid_micros, daily_budget_micros, time_zone, flight_start, dayparts, "
                "status, pacing_mode, frequency_caps, version, updated_at) VALUES "
                "(3, 1, 'old', 'clicks', 'CPC', 400000, 10000000, 'UTC', '2026-12-01', "
                "'[]', 'active', 'even', '[]', 1, '2026-12-01 00:00:00')"))
            conn.execute(text(
                "INSERT INTO placements (id, name, reserve_cpm_micros, "
                "country_reserves_cpm_micros, allowed_sizes, allowed_formats, version, "
                "updated_at) VALUES ('feed', 'Feed', 0, '{}', '[]', '[]', 1, "
                "'2026-12-01 00:00:00')"))
        upgrade(engine)
        store = SqlCampaignStore(engine)
        old = store.get_campaign(3)
        assert (old.bid_strategy, old.bid_cap_micros, old.target_cpa_micros,
                old.bid_strategy_since, old.bid_micros) == (
            BidStrategy.MANUAL, None, None, None, 400_000)
        assert store.get_placement("feed").auction_type is AuctionType.SECOND_PRICE
    finally:
        engine.dispose()
