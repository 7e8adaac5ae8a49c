"""The hand-written migration equals the tables declared on ``adfunnel.db.metadata``."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

import adfunnel.billing.rollup_tables
import adfunnel.billing.tables
import adfunnel.campaigns.tables
import adfunnel.campaigns.uploads
import adfunnel.pacing.traffic_tables  # noqa: F401  (registers the tables)
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
