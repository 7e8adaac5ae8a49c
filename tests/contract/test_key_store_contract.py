"""The KeyStore contract, run on memory, SQLite (a file, migrated to head) and
PostgreSQL (a schema of its own, migrated to head).

Rules under test: a key is found by its digest, revoked or not (the caller decides);
listing is by prefix and leaves revoked keys out unless asked; a revocation happens
once; a second key with the same prefix or digest is refused; times and advertiser
ids round-trip; a second store on the same database sees the same keys. Dashboard
sessions are kept by id digest, end one by one or per key, and drop once expired.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from adfunnel.auth.keys import ApiKey, Role, UiSession, digest, generate_key, prefix
from adfunnel.auth.store import DuplicateKey, KeyStore, MemoryKeyStore, SqlKeyStore
from adfunnel.campaigns.migrate import upgrade
from adfunnel.db import make_engine

NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)


def _record(role: Role = Role.ADVERTISER, advertiser_id: int | None = 7,
            key: str | None = None) -> tuple[str, ApiKey]:
    key = key or generate_key()
    return key, ApiKey(prefix(key), digest(key), role, advertiser_id, NOW)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], KeyStore]]:
    """A factory of stores over one fresh storage (each SQL store its own engine)."""
    if request.param == "memory":
        shared = MemoryKeyStore()
        yield lambda: shared
        return
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('keys') / 'keys.db'}"
    else:
        url = request.getfixturevalue("pg_schema_url")
    engines: list[Engine] = []

    def open_sql() -> KeyStore:
        engines.append(make_engine(url))
        return SqlKeyStore(engines[-1])

    upgrade(url)
    yield open_sql
    for engine in engines:
        engine.dispose()


@pytest.mark.slow
def test_a_key_is_found_by_its_digest_only(open_store: Callable[[], KeyStore]) -> None:
    store = open_store()
    key, record = _record()
    store.add(record)
    found = open_store().by_digest(digest(key))
    assert found == record
    assert found is not None and found.created_at == NOW and found.advertiser_id == 7
    assert store.by_digest(digest(key + "x")) is None
    assert store.by_digest(key) is None  # the clear key is not what is stored


@pytest.mark.slow
def test_listing_is_by_prefix_and_skips_revoked_keys(open_store: Callable[[], KeyStore]) -> None:
    store = open_store()
    records = [_record(Role.ADMIN, None)[1], _record()[1], _record(Role.REVIEWER, None)[1]]
    for r in records:
        store.add(r)
    assert [k.prefix for k in store.list()] == sorted(r.prefix for r in records)
    gone = records[1].prefix
    later = NOW + timedelta(minutes=5)
    assert store.revoke(gone, later)
    assert gone not in [k.prefix for k in open_store().list()]
    every = {k.prefix: k for k in open_store().list(include_revoked=True)}
    assert every[gone].revoked_at == later
    assert every[records[0].prefix].revoked_at is None
    revoked = open_store().by_digest(records[1].digest)
    assert revoked is not None and revoked.revoked_at == later


@pytest.mark.slow
def test_a_revocation_happens_once(open_store: Callable[[], KeyStore]) -> None:
    store = open_store()
    _, record = _record()
    store.add(record)
    assert store.revoke(record.prefix, NOW)
    assert not store.revoke(record.prefix, NOW + timedelta(hours=1))
    assert not store.revoke("no-such-key", NOW)
    found = store.by_digest(record.digest)
    assert found is not None and found.revoked_at == NOW


@pytest.mark.slow
def test_a_duplicate_prefix_or_digest_is_refused(open_store: Callable[[], KeyStore]) -> None:
    store = open_store()
    _, record = _record()
    store.add(record)
    with pytest.raises(DuplicateKey):
        store.add(ApiKey(record.prefix, digest("other"), Role.ADMIN, None, NOW))
    with pytest.raises(DuplicateKey):
        store.add(ApiKey("other-prefix", record.digest, Role.ADMIN, None, NOW))
    assert [k.prefix for k in store.list()] == [record.prefix]


@pytest.mark.slow
def test_a_key_is_found_by_its_prefix(open_store: Callable[[], KeyStore]) -> None:
    store = open_store()
    _, record = _record()
    store.add(record)
    assert open_store().by_prefix(record.prefix) == record
    assert open_store().by_prefix("no-such-key") is None


def _session(key_prefix: str, n: int, ttl: timedelta) -> UiSession:
    return UiSession(digest(f"session-{key_prefix}-{n}"), key_prefix, NOW, NOW + ttl)


@pytest.mark.slow
def test_sessions_round_trip_end_and_expire(open_store: Callable[[], KeyStore]) -> None:
    """Sessions by id digest; one ends alone, a key's end together, expired ones drop."""
    store = open_store()
    a1, a2 = _session("key-a", 1, timedelta(hours=1)), _session("key-a", 2, timedelta(hours=1))
    b1 = _session("key-b", 1, timedelta(hours=12))
    for s in (a1, a2, b1):
        store.add_session(s)
    assert open_store().session(a1.digest) == a1
    assert open_store().session(digest("unknown")) is None
    store.end_session(a1.digest)
    assert open_store().session(a1.digest) is None and open_store().session(a2.digest) == a2
    assert store.end_sessions("key-a") == 1
    assert open_store().session(a2.digest) is None and open_store().session(b1.digest) == b1
    assert store.drop_expired_sessions(NOW + timedelta(hours=11)) == 0
    assert store.drop_expired_sessions(NOW + timedelta(hours=12)) == 1
    assert open_store().session(b1.digest) is None
