"""Issue 7 §4 end to end: a CPM bid of 1,500 µ with reserve 1,500 µ, through the real
decision endpoint, impression beacons, ledger and campaign report."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.serving.helpers import ad_request, make_campaign


@pytest.fixture
def budget_mode() -> str:
    return "local"  # no pacing: every request is served


@pytest.mark.slow
def test_cpm_charges_never_exceed_the_bid(client: TestClient) -> None:
    made = make_campaign(client, bid_micros=1_500)
    slots = [{"id": "s1", "position": 1, "width": 300, "height": 250,
              "reserve_cpm_micros": 1_500}]
    n = 201
    for _ in range(n):
        r = client.post("/v1/ads:select", json=ad_request(slots=slots))
        assert r.status_code == 200, r.text
        [ad] = r.json()["ads"]
        assert ad["price_micros"] == 1_500  # per mille: at the reserve, not above the bid
        assert client.get(ad["impression_url"]).status_code == 204
    report = client.get(f"/v1/campaigns/{made['campaign']['id']}/report").json()
    assert report["impressions"] == n
    # exact: 201 × 1.5 µ = 301.5 µ; billed rounds the total down (was 2 µ each = 402 µ)
    assert report["billed_micros"] == 301
    assert report["ecpm_micros"] == 301 * 1_000 // n <= 1_500
    assert report["days"][0]["ecpm_micros"] <= 1_500
    assert report["absorbed_overspend_micros"] == 0
