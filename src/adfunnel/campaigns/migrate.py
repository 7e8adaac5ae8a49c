"""Bring a database's schema up to date with the Alembic migrations in the package.

No ``alembic.ini`` is read: the Alembic ``Config`` is built here with
``script_location`` pointing at ``adfunnel/migrations`` inside the installed package.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

from adfunnel.db import make_engine

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config() -> Config:
    """An Alembic config for the packaged migrations (no ini file)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    return cfg


def upgrade(engine_or_url: Engine | str, revision: str = "head") -> None:
    """Run ``alembic upgrade <revision>`` on a database; idempotent.

    ``engine_or_url``: an Engine (kept open; for ``sqlite://`` pass the engine, since a
    URL would open a different, empty in-memory database) or a URL for ``make_engine``
    (disposed afterwards).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused a statement.
        alembic.util.CommandError: unknown revision.
    """
    owned = isinstance(engine_or_url, str)
    engine = make_engine(engine_or_url) if owned else engine_or_url
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    finally:
        if owned:
            engine.dispose()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` before the first migration)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
