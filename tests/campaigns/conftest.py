"""Advertiser- and operator-API fixtures: a store on a fresh in-memory SQLite database, a
MemoryLedger."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from adfunnel.api.campaigns import make_advertiser_router
from adfunnel.api.errors import install_error_handlers
from adfunnel.api.operator import make_operator_router
from adfunnel.auth import ApiKeys, MemoryKeyStore, install_auth
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import FixedClock
from adfunnel.db import make_engine
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY

#: "Now" of every API test: Tuesday 2026-11-03 10:00 in New York.
NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)


@pytest.fixture
def store() -> Iterator[SqlCampaignStore]:
    """A store on a fresh, migrated in-memory SQLite database."""
    engine = make_engine("sqlite://")
    upgrade(engine)
    yield SqlCampaignStore(engine, FixedClock(NOW))
    engine.dispose()


@pytest.fixture
def ledger() -> MemoryLedger:
    return MemoryLedger()


@pytest.fixture
def client(store: SqlCampaignStore, ledger: MemoryLedger) -> Iterator[TestClient]:
    """The advertiser and operator APIs over ``store`` and ``ledger``, with the JSON error
    handlers, as the bootstrap admin (the app's ``state.api_keys`` issues other keys)."""
    app = FastAPI()
    install_error_handlers(app)
    install_auth(app, ApiKeys(MemoryKeyStore(), FixedClock(NOW), ADMIN_KEY))
    app.include_router(make_advertiser_router(store, ledger, FixedClock(NOW), None))
    app.include_router(make_operator_router(store))
    with TestClient(app, headers=ADMIN_HEADERS) as c:
        yield c
