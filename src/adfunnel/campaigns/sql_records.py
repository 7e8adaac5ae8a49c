"""The campaign store's records on SQL, whatever their entity: get one, list a keyset
page, and create or update one in a single transaction that takes the write lock, checks
the record (:mod:`adfunnel.campaigns.validate`), bumps its version and appends its change
(:mod:`adfunnel.campaigns.sql_change_log`); listeners hear each change after its commit.

:class:`~adfunnel.campaigns.sql_store.SqlCampaignStore` gives each entity its typed
methods over :class:`SqlRecords`; its docstring tells the commit-order rules.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from adfunnel.campaigns import codec
from adfunnel.campaigns.errors import AlreadyExists, InvalidChange, NotFound, VersionConflict
from adfunnel.campaigns.model import ChangeRecord
from adfunnel.campaigns.sql_change_log import append_change
from adfunnel.campaigns.store import ChangeListener
from adfunnel.campaigns.tables import ads, advertisers, campaigns, model_releases, placements
from adfunnel.campaigns.validate import check_record, coerce_values, storable_id, storable_key
from adfunnel.clock import Clock
from adfunnel.db import connection_guard

log = logging.getLogger(__name__)

TABLES = {"advertiser": advertisers, "campaign": campaigns, "ad": ads, "placement": placements,
          "model": model_releases}
#: Fields no update may change (identity, ownership, the version itself).
_FIXED = frozenset({"id", "version", "advertiser_id", "campaign_id"})
#: Arbitrary constant key of the PostgreSQL advisory lock serialising store writes.
_PG_WRITE_LOCK = 0x0ADF0C4A


class SqlRecords:
    """Records of every entity over ``engine``; ``clock`` stamps ``updated_at`` and
    ``committed_at``. Thread-safe: each call uses its own connection from the pool."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock
        self._pg = engine.dialect.name == "postgresql"
        self._listeners: list[ChangeListener] = []
        self._listeners_lock = threading.Lock()
        self._guard = connection_guard(engine)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection for reads (guarded: :func:`adfunnel.db.connection_guard`)."""
        with self._guard, self._engine.connect() as conn:
            yield conn

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self._guard, self._engine.begin() as conn:
            yield conn

    def subscribe(self, callback: ChangeListener) -> Callable[[], None]:
        """Call ``callback(change)`` after each commit made through *this* store object.

        Called on the writer's thread, in commit order per thread; a raising listener
        is logged and does not fail the write. Returns a function that unsubscribes.
        """
        with self._listeners_lock:
            self._listeners.append(callback)

        def unsubscribe() -> None:
            with self._listeners_lock:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return unsubscribe

    def get(self, entity: str, entity_id: int | str) -> Any:
        """The record ``entity_id`` of ``entity``.

        Raises:
            NotFound: no such record (or an id that could not be stored).
        """
        if not storable_key(entity, entity_id):
            raise NotFound(entity, entity_id)
        table = TABLES[entity]
        with self.connect() as conn:
            row = conn.execute(select(table).where(table.c.id == entity_id)).mappings().first()
        if row is None:
            raise NotFound(entity, entity_id)
        return codec.from_row(entity, row)

    def list_page(self, entity: str, where: Any = None, *, after: int | str | None = None,
                  limit: int | None = None) -> list[Any]:
        """Records of ``entity`` matching ``where``, by id: ids above ``after``, at most
        ``limit`` (a keyset page)."""
        table = TABLES[entity]
        stmt = select(table).order_by(table.c.id)
        if where is not None:
            stmt = stmt.where(where)
        if after is not None:
            stmt = stmt.where(table.c.id > after)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self.connect() as conn:
            return [codec.from_row(entity, r) for r in conn.execute(stmt).mappings()]

    def create(
        self, entity: str, values: dict[str, Any], parent: tuple[str, int] | None = None
    ) -> Any:
        """Create a record of ``entity`` (version 1) under ``parent`` (entity, id).

        Raises:
            NotFound: no such parent.
            AlreadyExists: a placement with this id exists.
            InvalidChange: a value breaking a domain rule.
        """
        values = coerce_values(entity, values)
        probe = codec.ENTITY_TYPES[entity](**{"id": 0, **values, "version": 1})
        check_record(probe)
        table = TABLES[entity]
        now = self._clock.now()
        with self._transaction() as conn:
            self._lock_writes(conn)
            if parent is not None:  # records are never deleted, so this stays true
                if not storable_id(parent[1]):
                    raise NotFound(*parent)
                ptable = TABLES[parent[0]]
                found = conn.execute(select(ptable.c.id).where(ptable.c.id == parent[1]))
                if found.first() is None:
                    raise NotFound(*parent)
            row = {**codec.to_row(entity, values), "version": 1, "updated_at": now}
            try:
                new_id = int(conn.execute(insert(table).values(row)).inserted_primary_key[0])
            except IntegrityError as exc:  # only placements choose their id
                if entity != "placement":
                    raise
                raise AlreadyExists(entity, probe.id) from exc
            record = probe if entity == "placement" else dataclasses.replace(probe, id=new_id)
            change = append_change(conn, record, now, new_id, pg=self._pg)
        self._notify(change)
        return record

    def update(
        self,
        entity: str,
        entity_id: int,
        changes: Mapping[str, Any],
        expected_version: int | None,
    ) -> Any:
        """Apply ``changes`` to a record and bump its version (``expected_version=None``:
        last writer wins).

        Raises:
            NotFound, VersionConflict, InvalidChange.
        """
        if not storable_key(entity, entity_id):
            raise NotFound(entity, entity_id)
        allowed = set(codec.field_names(entity)) - _FIXED
        for name in changes:
            if name not in allowed:
                problem = "cannot be changed" if name in _FIXED else "unknown field"
                raise InvalidChange(name, problem)
        typed = coerce_values(entity, dict(changes))
        table = TABLES[entity]
        now = self._clock.now()
        with self._transaction() as conn:
            self._lock_writes(conn)
            # Bump first: the write locks the row (and SQLite's database) before the read.
            bumped = conn.execute(
                update(table)
                .where(table.c.id == entity_id)
                .values(version=table.c.version + 1, updated_at=now)
            )
            if bumped.rowcount == 0:
                raise NotFound(entity, entity_id)
            row = conn.execute(select(table).where(table.c.id == entity_id)).mappings().one()
            current = codec.from_row(entity, row)
            if expected_version is not None and current.version - 1 != expected_version:
                raise VersionConflict(entity, entity_id, expected_version, current.version - 1)
            try:
                record = dataclasses.replace(current, **typed)
            except TypeError as exc:  # pragma: no cover - names were checked above
                raise InvalidChange("changes", str(exc)) from exc
            check_record(record)
            if typed:
                conn.execute(
                    update(table).where(table.c.id == entity_id).values(codec.to_row(entity, typed))
                )
            change = append_change(conn, record, now, row.get("row_id", record.id),
                                   pg=self._pg)
        self._notify(change)
        return record

    def _lock_writes(self, conn: Connection) -> None:
        if self._pg:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_WRITE_LOCK})

    def _notify(self, change: ChangeRecord) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(change)
            except Exception:  # a broken consumer must not fail a committed write
                log.exception("change listener %r failed on seq %d", listener, change.seq)
