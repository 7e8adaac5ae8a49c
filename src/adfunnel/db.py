"""SQLAlchemy engine construction and the one metadata every table registers on.

Engines are made by callers (never at import time). SQLite gets WAL and a busy
timeout so a single embedded process can write from several threads.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import AbstractContextManager, nullcontext

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


_write_locks: dict[str, threading.RLock] = {}
_guards: weakref.WeakKeyDictionary[Engine, threading.RLock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def sqlite_lock(engine: Engine) -> threading.RLock:
    """The one write lock of a SQLite database in this process (by URL): writers queue
    on it instead of in SQLite's sleeping busy handler."""
    key = engine.url.render_as_string(hide_password=True)
    with _locks_guard:
        return _write_locks.setdefault(key, threading.RLock())


def connection_guard(engine: Engine) -> AbstractContextManager[object]:
    """A lock serialising every use of an engine whose pool is one shared connection.

    In-memory SQLite (``sqlite://``) runs on one connection shared by all threads
    (``StaticPool``): interleaved use would mix transactions (one thread's read, and the
    rollback the pool does when the connection is returned, landing inside another's
    write), so every store and ledger on such an engine takes the same lock around each
    use. Other engines need none.
    """
    if not isinstance(engine.pool, StaticPool):
        return nullcontext()
    with _locks_guard:
        return _guards.setdefault(engine, threading.RLock())


def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
    cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
