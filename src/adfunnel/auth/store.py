"""Where API keys are kept: the :class:`KeyStore` interface, in memory and in SQL.

Both hold :class:`~adfunnel.auth.keys.ApiKey` records (digest and prefix, never a
key) and the dashboard's :class:`~adfunnel.auth.keys.UiSession` records (the digest of
a session id, never the id, and the prefix of the key it acts for). The SQL store's
tables ``api_keys`` (migration 0012) and ``ui_sessions`` (migration 0013) work on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Engine,
    String,
    Table,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.engine import RowMapping

from adfunnel.auth.keys import ApiKey, Role, UiSession
from adfunnel.db import connection_guard, metadata

api_keys = Table(
    "api_keys",
    metadata,
    Column("prefix", String(32), primary_key=True),
    Column("digest", String(64), nullable=False, unique=True),
    Column("role", String(16), nullable=False),
    Column("advertiser_id", BigInteger, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)

ui_sessions = Table(
    "ui_sessions",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("key_prefix", String(32), nullable=False, index=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)


class DuplicateKey(ValueError):
    """A key with this prefix or digest is already stored."""


class KeyStore(Protocol):
    """Stored API keys, by prefix and by digest."""

    def add(self, key: ApiKey) -> None:
        """Store ``key``. Raises :class:`DuplicateKey` when its prefix or digest exists."""
        ...

    def by_digest(self, digest: str) -> ApiKey | None:
        """The key with this digest, revoked or not; None when there is none."""
        ...

    def list(self, *, include_revoked: bool = False) -> list[ApiKey]:
        """Keys ordered by prefix; revoked ones only with ``include_revoked``."""
        ...

    def revoke(self, prefix: str, at: datetime) -> bool:
        """Mark the live key ``prefix`` revoked at ``at``; False when there is no live
        key of that prefix (unknown, or revoked already)."""
        ...

    def by_prefix(self, prefix: str) -> ApiKey | None:
        """The key named ``prefix``, revoked or not; None when there is none."""
        ...

    def add_session(self, session: UiSession) -> None:
        """Keep a new dashboard session."""
        ...

    def session(self, digest: str) -> UiSession | None:
        """The session with this id digest, expired or not; None when there is none."""
        ...

    def end_session(self, digest: str) -> None:
        """Forget one session (nothing when there is none)."""
        ...

    def end_sessions(self, key_prefix: str) -> int:
        """Forget every session of the key ``key_prefix``; how many there were."""
        ...

    def drop_expired_sessions(self, now: datetime) -> int:
        """Forget the sessions that expired at or before ``now``; how many."""
        ...


class MemoryKeyStore:
    """A :class:`KeyStore` in this process's memory (tests, throwaway servers)."""

    def __init__(self) -> None:
        self._keys: dict[str, ApiKey] = {}
        self._sessions: dict[str, UiSession] = {}
        self._lock = threading.Lock()

    def add(self, key: ApiKey) -> None:
        with self._lock:
            if key.prefix in self._keys or any(k.digest == key.digest
                                               for k in self._keys.values()):
                raise DuplicateKey(key.prefix)
            self._keys[key.prefix] = key

    def by_digest(self, digest: str) -> ApiKey | None:
        return next((k for k in self._keys.values() if k.digest == digest), None)

    def list(self, *, include_revoked: bool = False) -> list[ApiKey]:
        keys = sorted(self._keys.values(), key=lambda k: k.prefix)
        return [k for k in keys if include_revoked or k.revoked_at is None]

    def revoke(self, prefix: str, at: datetime) -> bool:
        with self._lock:
            key = self._keys.get(prefix)
            if key is None or key.revoked_at is not None:
                return False
            self._keys[prefix] = ApiKey(key.prefix, key.digest, key.role,
                                        key.advertiser_id, key.created_at, at)
            return True

    def by_prefix(self, prefix: str) -> ApiKey | None:
        return self._keys.get(prefix)

    def add_session(self, session: UiSession) -> None:
        with self._lock:
            self._sessions[session.digest] = session

    def session(self, digest: str) -> UiSession | None:
        return self._sessions.get(digest)

    def end_session(self, digest: str) -> None:
        with self._lock:
            self._sessions.pop(digest, None)

    def end_sessions(self, key_prefix: str) -> int:
        return self._drop(lambda s: s.key_prefix == key_prefix)

    def drop_expired_sessions(self, now: datetime) -> int:
        return self._drop(lambda s: s.expires_at <= now)

    def _drop(self, gone: Callable[[UiSession], bool]) -> int:
        with self._lock:
            doomed = [d for d, s in self._sessions.items() if gone(s)]
            for d in doomed:
                del self._sessions[d]
            return len(doomed)


class SqlKeyStore:
    """A :class:`KeyStore` in the ``api_keys`` table (migrated to head beforehand)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # in-memory SQLite is one connection shared by every thread: take turns on it
        self._guard = connection_guard(engine)

    def add(self, key: ApiKey) -> None:
        from sqlalchemy.exc import IntegrityError

        row = {"prefix": key.prefix, "digest": key.digest, "role": key.role.value,
               "advertiser_id": key.advertiser_id, "created_at": key.created_at,
               "revoked_at": key.revoked_at}
        try:
            with self._guard, self.engine.begin() as conn:
                conn.execute(insert(api_keys).values(**row))
        except IntegrityError as exc:
            raise DuplicateKey(key.prefix) from exc

    def by_digest(self, digest: str) -> ApiKey | None:
        with self._guard, self.engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.digest == digest)
                               ).mappings().first()
        return None if row is None else _record(row)

    def list(self, *, include_revoked: bool = False) -> list[ApiKey]:
        query = select(api_keys).order_by(api_keys.c.prefix)
        if not include_revoked:
            query = query.where(api_keys.c.revoked_at.is_(None))
        with self._guard, self.engine.connect() as conn:
            return [_record(r) for r in conn.execute(query).mappings()]

    def revoke(self, prefix: str, at: datetime) -> bool:
        with self._guard, self.engine.begin() as conn:
            done = conn.execute(update(api_keys)
                                .where(api_keys.c.prefix == prefix,
                                       api_keys.c.revoked_at.is_(None))
                                .values(revoked_at=at))
        return done.rowcount == 1

    def by_prefix(self, prefix: str) -> ApiKey | None:
        with self._guard, self.engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.prefix == prefix)
                               ).mappings().first()
        return None if row is None else _record(row)

    def add_session(self, session: UiSession) -> None:
        with self._guard, self.engine.begin() as conn:
            conn.execute(insert(ui_sessions).values(
                digest=session.digest, key_prefix=session.key_prefix,
                created_at=session.created_at, expires_at=session.expires_at))

    def session(self, digest: str) -> UiSession | None:
        with self._guard, self.engine.connect() as conn:
            row = conn.execute(select(ui_sessions).where(ui_sessions.c.digest == digest)
                               ).mappings().first()
        if row is None:
            return None
        return UiSession(row["digest"], row["key_prefix"], _aware(row["created_at"]),
                         _aware(row["expires_at"]))

    def end_session(self, digest: str) -> None:
        self._delete(ui_sessions.c.digest == digest)

    def end_sessions(self, key_prefix: str) -> int:
        return self._delete(ui_sessions.c.key_prefix == key_prefix)

    def drop_expired_sessions(self, now: datetime) -> int:
        return self._delete(ui_sessions.c.expires_at <= now)

    def _delete(self, where: Any) -> int:
        with self._guard, self.engine.begin() as conn:
            return conn.execute(delete(ui_sessions).where(where)).rowcount


def _record(row: RowMapping) -> ApiKey:
    revoked = row["revoked_at"]
    return ApiKey(row["prefix"], row["digest"], Role(row["role"]), row["advertiser_id"],
                  _aware(row["created_at"]), None if revoked is None else _aware(revoked))


def _aware(at: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
