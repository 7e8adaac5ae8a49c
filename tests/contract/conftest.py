"""Fixtures of the ledger contract suite: one ledger per backend, each test on fresh storage.

Backends: ``memory`` (MemoryLedger), ``sqlite`` (SqlLedger on a file in tmp_path) and
``postgres`` (SqlLedger on the PostgreSQL at ``ADFUNNEL_TEST_PG_URL``, default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``; skipped when unreachable).
Each PostgreSQL test gets its own schema (``pg_schema_url`` of tests/conftest.py),
dropped afterwards, so tests never depend on their order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import Engine

from adfunnel.billing.ledger import Ledger, MemoryLedger
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.tables import (
    campaign_day_spend,
    campaign_spend,
    ledger,
    ledger_counters,
    ledger_held,
    ledger_ivt,
)
from adfunnel.db import make_engine, metadata

LEDGER_TABLES = [ledger, campaign_day_spend, campaign_spend, ledger_counters, ledger_ivt,
                 ledger_held]


@dataclass
class LedgerBackend:
    """A ledger backend under test; ``open()`` gives a new ledger over the same storage
    (a new engine for SQL, as a restarted or second process would have)."""

    name: str
    open: Callable[[], Ledger]
    engines: list[Engine] = field(default_factory=list)


def _memory_backend() -> Iterator[LedgerBackend]:
    shared = MemoryLedger()
    yield LedgerBackend("memory", lambda: shared)


def _sql_backend(name: str, url: str) -> Iterator[LedgerBackend]:
    engines: list[Engine] = []

    def open_ledger() -> Ledger:
        engines.append(make_engine(url))
        return SqlLedger(engines[-1])

    try:
        open_ledger()
        metadata.create_all(engines[0], tables=LEDGER_TABLES)
        yield LedgerBackend(name, open_ledger, engines)
    finally:
        for engine in engines:
            engine.dispose()


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
        yield from _sql_backend("sqlite", f"sqlite:///{tmp_path / 'ledger.db'}")
    else:  # a fresh schema per test, from tests/conftest.py (skips without PostgreSQL)
        yield from _sql_backend("postgres", request.getfixturevalue("pg_schema_url"))
