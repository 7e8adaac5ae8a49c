"""The embedded app (in-memory SQLite, manual clock, local budget) for the OpenRTB tests,
and a catalogue builder whose ads have markup (an image creative_ref)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.serving.request import MAX_DEADLINE_MS
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.conftest import START
from tests.serving.helpers import SettlingClient, make_campaign

#: Image URL of the test ads (an http(s) creative_ref renders as an image).
IMAGE = "https://cdn.test/a.png"


@pytest.fixture
def openrtb_settings() -> dict[str, Any]:
    """Overrides of the app's settings (a test may replace the fixture)."""
    return {}


@pytest.fixture
def runtime(openrtb_settings: dict[str, Any]) -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local", admin_key=ADMIN_KEY, derive_client_facts=False,
                             public_base_url="https://ads.test", **openrtb_settings)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    yield rt
    rt.close()


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with SettlingClient(build_app(runtime), runtime, headers=ADMIN_HEADERS) as c:
        yield c


def banner_campaign(client: TestClient, width: int = 300, height: int = 250,
                    **overrides: Any) -> dict[str, Any]:
    """A CPM campaign with one image ad of ``width``×``height``."""
    ad = {"creative_ref": IMAGE, "width": width, "height": height, **overrides.pop("ad", {})}
    return make_campaign(client, ad=ad, **overrides)


def banner_request(**overrides: Any) -> dict[str, Any]:
    """A minimal OpenRTB 2.6 banner request for one 300x250 imp. Its ``tmax`` is the
    longest we honour: these tests judge answers, not speed, and a loaded CI machine once
    took over a second for one (a late 204 where the test wanted the reasons)."""
    body: dict[str, Any] = {
        "id": "req-1", "tmax": MAX_DEADLINE_MS,
        "imp": [{"id": "imp-1", "banner": {"w": 300, "h": 250}, "bidfloor": 0.5}],
        "site": {"id": "site-1", "domain": "news.test", "page": "https://news.test/a"},
        "device": {"ua": "Mozilla/5.0", "ip": "192.0.2.1",
                   "geo": {"country": "USA", "region": "FL"}},
        "user": {"id": "u1"},
    }
    body.update(overrides)
    return body
