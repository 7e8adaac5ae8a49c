"""Fixtures of the ledger contract suite: one ledger per backend, each test on fresh storage.

Backends: ``memory`` (MemoryLedger), ``sqlite`` (SqlLedger on a file in tmp_path) and
``postgres`` (SqlLedger on the PostgreSQL at ``ADFUNNEL_TEST_PG_URL``, default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``; skipped when unreachable).
Each PostgreSQL test gets its own schema, dropped afterwards, so tests never depend
on their order.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from adfunnel.billing.ledger import Ledger, MemoryLedger
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.tables import campaign_day_spend, ledger, ledger_counters
from adfunnel.db import make_engine, metadata

LEDGER_TABLES = [ledger, campaign_day_spend, ledger_counters]
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def ledger_pg_url() -> str:
    url = os.environ.get("ADFUNNEL_TEST_PG_URL", DEFAULT_PG_URL)
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url


@dataclass
class LedgerBackend:
    """A ledger backend under test; ``open()`` gives a new ledger over the same storage
    (a new engine for SQL, as a restarted or second process would have)."""

    name: str
    open: Callable[[], Ledger]
    engines: list[Engine] = field(default_factory=list)

    @property
    def durable(self) -> bool:
        return self.name != "memory"


@pytest.fixture(scope="session")
def ledger_pg_admin() -> Iterator[Engine]:
    engine = create_engine(ledger_pg_url(), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:  # any connection failure means "no PostgreSQL here"
        engine.dispose()
        pytest.skip(f"PostgreSQL not reachable at {ledger_pg_url()}: {exc}")
    yield engine
    engine.dispose()


def _memory_backend() -> Iterator[LedgerBackend]:
    shared = MemoryLedger()
    yield LedgerBackend("memory", lambda: shared)


def _sqlite_backend(tmp_path: Path) -> Iterator[LedgerBackend]:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engines: list[Engine] = []

    def open_ledger() -> Ledger:
        engines.append(make_engine(url))
        return SqlLedger(engines[-1])

    setup = make_engine(url)
    metadata.create_all(setup, tables=LEDGER_TABLES)
    setup.dispose()
    try:
        yield LedgerBackend("sqlite", open_ledger, engines)
    finally:
        for engine in engines:
            engine.dispose()


def _postgres_backend(admin: Engine) -> Iterator[LedgerBackend]:
    schema = f"test_{uuid.uuid4().hex}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    engines: list[Engine] = []

    def open_ledger() -> Ledger:
        engines.append(
            create_engine(
                ledger_pg_url(),
                connect_args={"options": f"-csearch_path={schema}"},
                pool_size=10,
                max_overflow=10,
            )
        )
        return SqlLedger(engines[-1])

    try:
        open_ledger()
        metadata.create_all(engines[0], tables=LEDGER_TABLES)
        yield LedgerBackend("postgres", open_ledger, engines)
    finally:
        for eng in engines:
            eng.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def ledger_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LedgerBackend]:
    """Fresh, empty storage for one test on each ledger backend."""
    if request.param == "memory":
        yield from _memory_backend()
    elif request.param == "sqlite":
        yield from _sqlite_backend(tmp_path)
    else:
        yield from _postgres_backend(request.getfixturevalue("ledger_pg_admin"))
