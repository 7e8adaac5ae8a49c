"""An embedded app (in-memory SQLite, manual clock, the test admin key) and clients
acting as each role."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    yield rt
    rt.close()


@pytest.fixture
def http(runtime: Runtime) -> Iterator[TestClient]:
    """The app, with no credentials of its own: each request sends its key."""
    with TestClient(build_app(runtime)) as c:
        yield c


@pytest.fixture
def key_for(http: TestClient) -> Callable[..., dict[str, str]]:
    """Issue a key as the admin (``POST /v1/api-keys``); the headers that send it."""

    def issue(role: str, advertiser_id: int | None = None) -> dict[str, str]:
        r = http.post("/v1/api-keys", json={"role": role, "advertiser_id": advertiser_id},
                      headers=ADMIN_HEADERS)
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['key']}"}

    return issue
