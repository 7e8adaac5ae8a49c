"""Request and campaign builders shared by the serving tests."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime

#: The tracker's routes: the aggregator records their events after the answer.
BEACON_PATHS = frozenset({"/i", "/c", "/v"})


class SettlingClient(TestClient):
    """A test client of an embedded app that, after each beacon, waits until the
    aggregator's thread has recorded it (bounded: :meth:`EventPlane.settle`), so a test
    reads what the beacon billed without racing the aggregator."""

    def __init__(self, app: Any, runtime: Runtime, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.runtime = runtime

    def request(self, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().request(method, url, *args, **kwargs)
        if urlsplit(str(url)).path in BEACON_PATHS:
            assert self.runtime.events.settle(), "the aggregator did not catch up"
        return response


def make_campaign(client: TestClient, **overrides: Any) -> dict[str, Any]:
    """An advertiser, an active CPM campaign and one approved 300x250 ad. The campaign
    bills on render (``billable_event``: these tests fire ``/i`` as the served
    impression; pass ``billable_event="viewable"`` to bill on ``/vi``)."""
    adv = client.post("/v1/advertisers", json={"name": "acme"}).json()
    body: dict[str, Any] = {
        "advertiser_id": adv["id"], "name": "c", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": 100_000_000,
        "time_zone": "UTC", "flight_start": "2026-07-01", "billable_event": "rendered",
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
        # a test that needs an answer must not ride on the 100 ms default under CI load
        # (a late decision answers 204); deadline tests set their own
        "deadline_ms": 5_000,
    }
    body.update(overrides)
    return body
