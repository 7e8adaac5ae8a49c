"""Where API keys are kept: the :class:`KeyStore` interface, in memory and in SQL.

Both hold :class:`~adfunnel.auth.keys.ApiKey` records (digest and prefix, never a
key). The SQL store's table ``api_keys`` is created by migration 0012 and works on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import BigInteger, Column, DateTime, Engine, String, Table, insert, select, update
from sqlalchemy.engine import RowMapping

from adfunnel.auth.keys import ApiKey, Role
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


class MemoryKeyStore:
    """A :class:`KeyStore` in this process's memory (tests, throwaway servers)."""

    def __init__(self) -> None:
        self._keys: dict[str, ApiKey] = {}
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


def _record(row: RowMapping) -> ApiKey:
    revoked = row["revoked_at"]
    return ApiKey(row["prefix"], row["digest"], Role(row["role"]), row["advertiser_id"],
                  _aware(row["created_at"]), None if revoked is None else _aware(revoked))


def _aware(at: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
