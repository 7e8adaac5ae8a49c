"""SQLAlchemy engine construction and the one metadata every table registers on.

Engines are made by callers (never at import time). SQLite gets WAL and a busy
timeout so a single embedded process can write from several threads.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    DateTime,
    Engine,
    MetaData,
    Table,
    create_engine,
    event,
)
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


#: PostgreSQL element type of a column type, for array parameters (``unnest``, ``ANY``).
_PG_ELEMENT = {"BigInteger": "bigint", "Integer": "integer", "String": "text", "Date": "date",
               "Boolean": "boolean"}


def pg_element_type(column: Column[Any]) -> str:
    """The PostgreSQL type of ``column``'s values as an array element ("bigint", "text",
    "timestamptz", ...).

    Raises:
        KeyError: for a column type this module does not map.
    """
    kind = column.type
    if isinstance(kind, DateTime):
        return "timestamptz" if kind.timezone else "timestamp"
    for cls in type(kind).__mro__:
        if cls.__name__ in _PG_ELEMENT:
            return _PG_ELEMENT[cls.__name__]
    raise KeyError(f"no PostgreSQL array type for {column.name}: {kind!r}")


@functools.lru_cache(maxsize=64)
def pg_unnest_insert(table: Table, columns: tuple[str, ...], *,
                     conflict: tuple[str, ...] = (), returning: str | None = None) -> str:
    """``INSERT INTO table (columns) SELECT * FROM unnest(%(col1)b, ...)`` [``ON
    CONFLICT (conflict) DO NOTHING``] [``RETURNING returning``], psycopg 3 text.

    Run it on the DBAPI cursor (:func:`pg_insert_columns`): each parameter is the list
    of one column's values (:func:`pg_columns`), sent as a binary array, so whatever the
    number of rows there is one statement and one short query text, and the driver
    neither parses a long query (SQLAlchemy's multi-row VALUES costs psycopg a parse of
    the whole text on every batch) nor escapes text arrays element by element.
    """
    arrays = ", ".join(f"CAST(%({c})b AS {pg_element_type(table.c[c])}[])" for c in columns)
    sql = f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT * FROM unnest({arrays})"
    if conflict:
        sql += f" ON CONFLICT ({', '.join(conflict)}) DO NOTHING"
    if returning:
        sql += f" RETURNING {returning}"
    return sql


def pg_insert_columns(conn: Connection, table: Table, rows: Sequence[Mapping[str, object]], *,
                      conflict: tuple[str, ...] = (), returning: str | None = None
                      ) -> list[tuple[Any, ...]]:
    """Insert ``rows`` (mappings with the same keys) into ``table`` in one statement on
    ``conn``'s PostgreSQL connection, inside its transaction; the ``returning`` column
    of the rows inserted (none without ``returning``)."""
    if not rows:
        return []
    columns = tuple(rows[0])
    sql = pg_unnest_insert(table, columns, conflict=conflict, returning=returning)
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor:
        cursor.execute(sql, pg_columns(rows, columns))
        return list(cursor.fetchall()) if returning else []


def pg_columns(rows: Sequence[Mapping[str, object]], columns: Sequence[str]
               ) -> dict[str, list[object]]:
    """Rows as one list per column, the parameters of :func:`pg_unnest_insert`."""
    return {c: [row[c] for row in rows] for c in columns}
