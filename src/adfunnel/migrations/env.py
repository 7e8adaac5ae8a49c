"""Alembic environment: runs migrations on a connection handed in by the caller.

``adfunnel.campaigns.migrate.upgrade`` puts an open SQLAlchemy ``Connection`` in
``config.attributes["connection"]``; the ``alembic`` command line instead gives a
``sqlalchemy.url`` (``-x url=...`` or the ini file), from which an engine is made.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

import adfunnel.api.idempotency_tables
import adfunnel.billing.rollup_tables
import adfunnel.billing.tables
import adfunnel.budget.multiplier_tables
import adfunnel.campaigns.tables
import adfunnel.forecast.tables
import adfunnel.pacing.traffic_tables
import adfunnel.serving.placement_tables  # noqa: F401  (registers the tables on the metadata)
from adfunnel.db import make_engine, metadata

config = context.config
target_metadata = metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    """Migrate over the caller's connection, or one made from the configured URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise RuntimeError("no database: pass -x url=... or set sqlalchemy.url")
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


def run_offline() -> None:
    """Emit SQL text for the configured URL instead of executing it."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
