"""The dashboard's availability forecast (``/ui/forecasts``) on a real embedded app: the
admin's form answers what ``POST /v1/forecasts`` answers, a booked guaranteed line shows
as contending, the form's problems are named by field, and other roles are refused.

Mutations seen red: the page sending no targeting (``forecast_body`` dropping it): the
matching figure differs from the API's; the admin check removed from the page: an
advertiser reads the form.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.forecast.test_forecast_api import rt  # noqa: F401  (the fixture: T0, manual clock)
from tests.ui.test_pages import log_in

T0 = datetime(2026, 11, 2, tzinfo=UTC)
API_BODY: dict[str, Any] = {"targeting": {"attr": "geo.country", "in": ["US"]},
                            "placements": ["feed"], "flight_start": "2026-11-03",
                            "flight_end": "2026-11-04", "time_zone": "UTC", "goal": 500}
FORM = {"targeting": '{"attr": "geo.country", "in": ["US"]}', "placements": "feed",
        "flight_start": "2026-11-03", "flight_end": "2026-11-04", "time_zone": "UTC",
        "goal": "500"}


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:  # noqa: F811
    """A day of history (US and FR requests on ``feed``) and a guaranteed line on US
    mobile requests booked over the forecast's flight."""
    with TestClient(build_app(rt), headers=ADMIN_HEADERS, follow_redirects=False) as c:
        assert c.post("/v1/placements", json={"id": "feed", "name": "Feed"}).status_code == 201
        for hour in range(24):
            clock = {"now": (T0 + timedelta(hours=hour)).isoformat()}
            assert c.put("/v1/admin/clock", json=clock).status_code == 200
            for i in range(6):
                r = c.post("/v1/ads:select", json={
                    "user": {"key": f"u{hour}-{i}",
                             "attributes": {"geo.country": "US" if i % 3 else "FR",
                                            "device_type": "mobile" if i % 2 else "desktop"}},
                    "placement": {"id": "feed"},
                    "slots": [{"id": "s", "position": 1, "width": 300, "height": 250}]})
                assert r.status_code in (200, 204), r.text
        c.put("/v1/admin/clock", json={"now": (T0 + timedelta(hours=24)).isoformat()})
        adv = c.post("/v1/advertisers", json={"name": "Direct"}).json()["id"]
        r = c.post("/v1/campaigns", json={
            "advertiser_id": adv, "name": "mobile deal", "objective": "impressions",
            "bid_type": "CPM", "bid_micros": 2_000_000, "time_zone": "UTC",
            "flight_start": "2026-11-03", "flight_end": "2026-11-04",
            "priority": "guaranteed", "budget_period": "flight",
            "goal": {"metric": "impressions", "total": 60},
            "targeting": {"attr": "device_type", "in": ["mobile"]}})
        assert r.status_code == 201, r.text
        yield c


def _figure(page: str, element: str) -> int:
    m = re.search(rf'id="{element}">([\d,]+)<', page)
    assert m is not None, element
    return int(m.group(1).replace(",", ""))


def test_the_form_answers_what_the_api_answers(client: TestClient) -> None:
    api = client.post("/v1/forecasts", json=API_BODY).json()
    assert api["matching_impressions"] > 0 and api["contending_lines"]
    log_in(client, ADMIN_KEY)
    page = client.post("/ui/forecasts", data=FORM, headers={"Authorization": ""})
    assert page.status_code == 200, page.text
    assert _figure(page.text, "forecast-matching") == api["matching_impressions"]
    assert _figure(page.text, "forecast-available") == api["available_impressions"]
    assert api["available_impressions"] < api["matching_impressions"]
    assert "mobile deal" in page.text and "hour of day" in page.text
    assert "exceeds what is available" in page.text  # goal 500 of ~160 matching


def test_the_forms_problems_are_named(client: TestClient) -> None:
    log_in(client, ADMIN_KEY)
    page = client.post("/ui/forecasts", data={**FORM, "targeting": "{not json"},
                       headers={"Authorization": ""})
    assert page.status_code == 422 and 'id="error-targeting"' in page.text
    page = client.post("/ui/forecasts", data={**FORM, "flight_end": "2026-11-01"},
                       headers={"Authorization": ""})
    assert page.status_code == 422 and 'id="error-flight_end"' in page.text
    assert 'value="2026-11-01"' in page.text  # the form keeps what was typed


def test_only_the_admin_sees_forecasts(rt: Runtime, client: TestClient) -> None:  # noqa: F811
    adv = rt.store.create_advertiser("A")
    log_in(client, rt.keys.issue("advertiser", adv.id).key)
    for r in (client.get("/ui/forecasts", headers={"Authorization": ""}),
              client.post("/ui/forecasts", data=FORM, headers={"Authorization": ""})):
        assert r.status_code == 403 and "forecast-form" not in r.text
    assert "/ui/forecasts" not in client.get("/ui/campaigns",
                                             headers={"Authorization": ""}).text
