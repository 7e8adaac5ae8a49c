"""A real embedded app (in-memory SQLite, manual clock) behind Starlette's TestClient."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.helpers import SettlingClient

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def budget_mode() -> str:
    """The spend gate: the in-process budget service (default) or ``local``."""
    return "service"


@pytest.fixture
def runtime(budget_mode: str) -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget=budget_mode, admin_key=ADMIN_KEY)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    yield rt
    rt.close()


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    """The embedded app, as the bootstrap admin (``ADMIN_HEADERS``); each beacon's event
    is recorded before the next request (:class:`SettlingClient`)."""
    with SettlingClient(build_app(runtime), runtime, headers=ADMIN_HEADERS) as c:
        yield c
