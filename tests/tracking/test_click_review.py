"""A click lands only where a reviewer has looked: an advertiser's edit of an approved
ad's landing URL sends the ad back to review, and a click on a token served before the
edit (kept in a page, or fetched by anyone from the open ``ads:select``; an expired one
still redirects) must not go to the URL no reviewer has approved. The embedded app
(in-memory SQLite, manual clock)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.helpers import ad_request, make_campaign

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
EVIL = "https://evil.test/phish"


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local", admin_key=ADMIN_KEY)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    yield rt
    rt.close()


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(build_app(runtime), headers=ADMIN_HEADERS) as c:
        yield c


def _advertiser_key(client: TestClient, advertiser_id: int) -> dict[str, str]:
    r = client.post("/v1/api-keys", json={"role": "advertiser", "advertiser_id": advertiser_id})
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


def _lands(client: TestClient, click_url: str) -> str | None:
    r = client.get(click_url, follow_redirects=False)
    return r.headers.get("location") if r.status_code == 302 else None


def test_a_click_never_lands_on_a_landing_url_no_reviewer_approved(
        client: TestClient, runtime: Runtime) -> None:
    made = make_campaign(client)
    key = _advertiser_key(client, made["advertiser"]["id"])
    ad = client.post("/v1/ads:select", json=ad_request()).json()["ads"][0]
    assert (_lands(client, ad["click_url"]) or "").startswith("https://x.test/p")

    r = client.patch(f"/v1/ads/{ad['ad_id']}", json={"landing_url": EVIL}, headers=key)
    assert r.status_code == 200 and r.json()["review_state"] == "pending_review", r.text
    assert not (_lands(client, ad["click_url"]) or "").startswith(EVIL)  # pending
    assert runtime.tracker.counts() == {"unlanded_click": 1}  # the 404 page bills nothing

    r = client.post(f"/v1/ads/{ad['ad_id']}:reject")
    assert r.status_code == 200, r.text
    assert not (_lands(client, ad["click_url"]) or "").startswith(EVIL)  # rejected
    assert isinstance(runtime.clock, ManualClock)
    runtime.clock.set(START + timedelta(hours=2))  # an expired token still redirects
    assert not (_lands(client, ad["click_url"]) or "").startswith(EVIL)

    r = client.post(f"/v1/ads/{ad['ad_id']}:approve")  # once a reviewer approved it
    assert r.status_code == 200, r.text
    assert _lands(client, ad["click_url"]) == EVIL
