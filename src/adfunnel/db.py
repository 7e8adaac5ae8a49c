"""SQLAlchemy engine construction and the one metadata every table registers on.

Engines are made by callers (never at import time). SQLite gets WAL and a busy
timeout so a single embedded process can write from several threads.
"""

from __future__ import annotations

from sqlalchemy import Engine, MetaData, create_engine, event
from sqlalchemy.pool import StaticPool

metadata = MetaData()


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (``sqlite:///file``, ``sqlite://`` or ``postgresql+psycopg://``)."""
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    if url.startswith("sqlite"):
        in_memory = url in ("sqlite://", "sqlite:///:memory:")
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            poolclass=StaticPool if in_memory else None,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
    cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
