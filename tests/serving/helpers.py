"""Request and campaign builders shared by the serving tests."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient


def make_campaign(client: TestClient, **overrides: Any) -> dict[str, Any]:
    """An advertiser, an active CPM campaign and one approved 300x250 ad."""
    adv = client.post("/v1/advertisers", json={"name": "acme"}).json()
    body: dict[str, Any] = {
        "advertiser_id": adv["id"], "name": "c", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": 100_000_000,
        "time_zone": "UTC", "flight_start": "2026-07-01",
    }
    ad_fields = overrides.pop("ad", {})
    body.update(overrides)
    r = client.post("/v1/campaigns", json=body)
    assert r.status_code == 201, r.text
    campaign = r.json()
    ad = client.post(f"/v1/campaigns/{campaign['id']}/ads", json={
        "landing_url": "https://x.test/p?a=1&b=2&c=%20", "creative_ref": "cr/1.png",
        "format": "banner", "width": 300, "height": 250, **ad_fields,
    })
    assert ad.status_code == 201, ad.text
    return {"advertiser": adv, "campaign": campaign, "ad": ad.json()}


def ad_request(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "user": {"key": "u1", "attributes": {"geo.country": "US", "interests": ["cars"]}},
        "placement": {"id": "feed"},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
    }
    body.update(overrides)
    return body
